"""ReadCache: what a read found is kept until a write forgets it; a read a write overtook
is never kept."""

from __future__ import annotations

from embedlog.readcache import ReadCache


def test_a_kept_value_is_served_until_a_write_forgets_its_key() -> None:
    cache: ReadCache[str, int] = ReadCache()
    cache.keep("a", 1, cache.ticket())
    cache.keep("b", 2, cache.ticket())
    assert (cache.get("a"), cache.get("b")) == (1, 2)
    cache.forget(["a"])
    assert (cache.get("a"), cache.get("b")) == (None, 2)
    cache.forget(None)  # a write that may have changed anything
    assert cache.get("b") is None


def test_a_read_that_a_write_overtook_is_not_kept() -> None:
    cache: ReadCache[str, int] = ReadCache()
    ticket = cache.ticket()  # the read begins
    cache.forget(["other"])  # any write in between, even of another key
    cache.keep("a", 1, ticket)  # the read ends with what may be the old value
    assert cache.get("a") is None
    cache.keep("a", 2, cache.ticket())
    assert cache.get("a") == 2


def test_the_bound_drops_the_oldest_kept_first() -> None:
    cache: ReadCache[int, int] = ReadCache(bound=2)
    for key in range(3):
        cache.keep(key, key * 10, cache.ticket())
    assert [cache.get(k) for k in range(3)] == [None, 10, 20]
