"""What a stream promises under concurrency: trims never pass a committed cursor, a
deleted stream acknowledges nothing and keeps no cursors, retention counts what readers
see and keeps at least each limit (issue #27)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

import pytest
from unbounded_helpers import DelegatingStore, wait_until

from embedlog import Retention
from embedlog.aio import AsyncUnboundedLedger
from embedlog.errors import (
    InvalidTermError,
    LedgerDeletedError,
    MetadataError,
    NoSuchLedgerInMetadataError,
)
from embedlog.metadata import sinks, streams
from embedlog.metadata.client import ledger_path
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.metadata.store import ANY_VERSION, MetadataStore, NoNodeError
from embedlog.unbounded import layout

IDLE = 30.0


class AfterCursorRead(DelegatingStore):
    """A store that runs ``hook`` once, right after someone listed ``path``'s children
    (the cursor read a trim decides from): the commit that lands between a trim's read of
    the cursors and its compare-and-swap."""

    def __init__(self, inner: MetadataStore, path: str) -> None:
        super().__init__(inner)
        self.path = path
        self.hook: Callable[[], None] | None = None
        self.fired = threading.Event()

    def children(self, path: str) -> list[str]:
        out = self.inner.children(path)
        hook = self.hook
        if path == self.path and hook is not None:
            self.hook = None
            hook()
            self.fired.set()
        return out


def _first(client, lid: int) -> int:
    return min(client.ledger_metadata(lid).ensembles)


# -- no trim passes a committed cursor ------------------------------------------------------


def test_a_commit_between_a_trims_cursor_read_and_its_swap_holds_the_trim_back(
    make_cluster, zk_uri
):
    """The issue's race, forced: the writer's retention reads the cursors (none), a new
    consumer commits at the first kept entry, the writer swaps in its trim. The trim must
    stop at the commit + 1, then and later."""
    cluster = make_cluster(4, metadata_uri=zk_uri)
    w = cluster.client("writer")
    ul = w.create_unbounded(3, 3, 2, name="orders", retention=Retention(max_entries=20))
    follower = cluster.client("consumer").open_unbounded("orders", takeover=False)
    hooked = AfterCursorRead(cluster.metadata.store, f"{streams.CURSORS}/{ul.ledger_id:020d}")
    cluster.metadata.store = hooked
    for i in range(30):
        ul.append(b"%d" % i)
    wait_until(lambda: _first(w, ul.ledger_id) > 0)
    committed: list[int] = []

    def commit_now() -> None:
        # At the trim point decided now. Rollovers meanwhile start retention rounds of
        # their own, and one that decides between this read and the commit's touch
        # legitimately passes x (the commit fell behind a trim decided first, and
        # resumes at it): commit again at the new trim point until none did.
        store = cluster.metadata.store.inner
        while True:
            x = streams.trim_point(store, ul.ledger_id)[0]
            follower.commit("n51", x)
            if streams.trim_point(store, ul.ledger_id)[0] == x:
                break
        committed.append(x)
        assert _first(w, ul.ledger_id) <= x + 1  # as the commit returns

    hooked.hook = commit_now
    for i in range(30, 120):
        ul.append(b"%d" % i)
    assert hooked.fired.wait(IDLE)
    (x,) = committed
    ul.writer is not None and w.runtime.run(ul.writer.apply_retention())
    assert _first(w, ul.ledger_id) <= x + 1
    assert [e.entry_id for e in follower.tail(cursor="n51", timeout=0)][:1] == [x + 1]


@pytest.mark.parametrize("kind", ["memory", "leveldb", "zookeeper"])
def test_commit_and_trim_decision_serialize_on_every_store(kind, make_cluster, request):
    """The two halves on the store itself: a commit that lands inside a trim's decision
    makes the decision read the cursors again."""
    uri = {"memory": "memory://", "leveldb": None}.get(kind)
    if kind == "zookeeper":
        uri = request.getfixturevalue("zk_uri")
    cluster = make_cluster(3, metadata_uri=uri)
    ul = cluster.client("w").create_unbounded(3, 3, 2)
    for i in range(10):
        ul.append(b"%d" % i)
    store = cluster.metadata.store
    seen: list[dict[str, int]] = []

    def wanted(decided: int, cursors: dict[str, int]) -> int:
        seen.append(dict(cursors))
        if len(seen) == 1:  # a consumer commits while this decision is being made
            assert streams.commit(store, ul.ledger_id, "late", 3, False) == decided
        return min([9, *(p + 1 for p in cursors.values())])

    assert streams.raise_trim_point(store, ul.ledger_id, wanted) == 4
    assert seen == [{}, {"late": 3}]
    # Forward only: a later decision never lowers the trim point.
    assert streams.raise_trim_point(store, ul.ledger_id, lambda d, c: 2) == 4
    assert streams.trim_point(store, ul.ledger_id)[0] == 4


def test_retention_under_concurrent_commits_never_passes_a_returned_commit(make_cluster):
    """Consumers committing fresh cursors at the first kept entry while a writer appends
    with tight retention: after every commit returned, the stream's first kept entry
    stays at or below the commit + 1 (while that cursor stands)."""
    cluster = make_cluster(4)
    w = cluster.client("writer")
    ul = w.create_unbounded(3, 3, 2, retention=Retention(max_entries=10), fragment_max_entries=2)
    follower = cluster.client("consumer").open_unbounded(ul.ledger_id, takeover=False)
    stop = threading.Event()
    returned: list[tuple[str, int]] = []
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            n = 0
            while not stop.is_set():
                x = _first(w, ul.ledger_id)
                name = f"c{n}"
                follower.commit(name, x)
                returned.append((name, x))
                n += 1
                if n % 5 == 0:  # release the older ones so retention keeps moving
                    for old, _ in returned[-5:-1]:
                        follower.delete_cursor(old)
                        returned.remove(next(r for r in returned if r[0] == old))
        except BaseException as exc:  # reported below
            errors.append(exc)

    for i in range(5):
        ul.append(b"%d" % i)
    t = threading.Thread(target=consume)
    t.start()
    try:
        for i in range(5, 400):
            ul.append(b"%d" % i)
    finally:
        stop.set()
        t.join()
    assert not errors
    w.runtime.run(ul.writer.apply_retention())
    first = _first(w, ul.ledger_id)
    standing = follower.cursors()
    for name, x in returned:
        if name in standing:
            assert first <= x + 1, (name, x, first)
    assert len(returned) > 20


# -- deletes --------------------------------------------------------------------------------


def test_a_deleted_stream_refuses_appends_follows_commits_and_sink_records(make_cluster):
    cluster = make_cluster(3)
    w = cluster.client("writer")
    ul = w.create_unbounded(3, 3, 2, name="gone")
    for i in range(5):
        ul.append(b"%d" % i)
    follower = cluster.client("follower").open_unbounded("gone", takeover=False)
    follower.commit("ghost", 2)
    lid = ul.ledger_id
    store = cluster.metadata.store
    cluster.client("admin").delete_ledger(lid)

    with pytest.raises(LedgerDeletedError, match="deleted"):
        ul.append(b"after the delete")
    with pytest.raises(LedgerDeletedError, match="deleted"):
        ul.append(b"and again")
    with pytest.raises(LedgerDeletedError, match="deleted"):
        list(follower.tail(0, timeout=IDLE))
    with pytest.raises(LedgerDeletedError, match="deleted"):
        follower.commit("ghost", 3)
    with pytest.raises(LedgerDeletedError, match="deleted"):
        sinks.write(store, lid, "sink-1", b"{}", None)
    # Deleting removed the cursors; the refused commit and sink record left nothing.
    assert not store.exists(f"{streams.CURSORS}/{lid:020d}")
    assert not store.exists(f"{streams.CURSORS}/{lid:020d}/ghost")
    assert store.children(f"{sinks.SINKS}/{lid:020d}") == []
    assert "gone" not in w.list_streams()


def test_appends_racing_a_delete_are_never_acknowledged_after_it_returned(make_cluster):
    """A writer streams appends while another client deletes the stream: once the delete
    returned, no append of the old handle completes, and each fails naming the delete."""
    cluster = make_cluster(4)
    w = cluster.client("writer")
    ul = w.create_unbounded(3, 3, 2)
    deleted = threading.Event()
    late: list[int] = []
    failures: list[BaseException] = []

    def write() -> None:
        i = 0
        while True:
            try:
                eid = ul.append(b"%d" % i)
            except LedgerDeletedError as exc:
                failures.append(exc)
                return
            if deleted.is_set():
                late.append(eid)
            i += 1

    t = threading.Thread(target=write)
    t.start()
    wait_until(lambda: ul.last_add_confirmed >= 50)
    cluster.client("admin").delete_ledger(ul.ledger_id)
    deleted.set()
    t.join()
    assert late == []
    assert len(failures) == 1


class DeleteBeforeRollover(DelegatingStore):
    """A store that, at the first write of ``path`` once armed (a writer's rollover
    swapping in its new fragment), lets ``first`` (a delete) finish first: the rollover then finds
    the ledger's node gone."""

    def __init__(self, inner: MetadataStore, path: str) -> None:
        super().__init__(inner)
        self.path = path
        self.first: Callable[[], None] | None = None

    def set(self, path: str, data: bytes, version: int) -> int:
        first = self.first
        if path == self.path and first is not None:
            self.first = None  # the delete's own writes of the node go through
            first()
        return self.inner.set(path, data, version)


def test_a_rollover_that_finds_its_stream_deleted_fails_the_appends_as_deleted(make_cluster):
    """The delete finishes (its node removed) between a rollover's decision and its
    compare-and-swap: the appends waiting for the new fragment, and every later one, fail
    with LedgerDeletedError, not with the metadata store's 'does not exist'."""
    cluster = make_cluster(4)
    w = cluster.client("writer")
    ul = w.create_unbounded(3, 3, 2, fragment_max_entries=5)
    store = DeleteBeforeRollover(cluster.metadata.store, ledger_path(ul.ledger_id))
    cluster.metadata.store = store
    admin = cluster.client("admin")
    store.first = lambda: admin.delete_ledger(ul.ledger_id)
    for i in range(5):
        ul.append(b"%d" % i)
    with pytest.raises(LedgerDeletedError, match="deleted"):
        ul.append(b"5: starts the next fragment")
    assert store.first is None  # the rollover met the delete
    with pytest.raises(LedgerDeletedError, match="deleted"):
        ul.append(b"and again")


# -- retention counts what readers see ------------------------------------------------------


def _visible(client, lid: int) -> list:
    f = client.open_unbounded(lid, takeover=False)
    return list(f.entries(_first(client, lid)))


def test_max_entries_counts_entries_not_noop_ids_across_takeovers(make_cluster):
    cluster = make_cluster(4)
    clients = [cluster.client("a"), cluster.client("b")]
    ul = clients[0].create_unbounded(3, 3, 2, retention=Retention(max_entries=20))
    lid = ul.ledger_id
    ul.append(b"0")
    for i in range(1, 80):
        ul.close()
        ul = clients[i % 2].open_unbounded(lid)  # a takeover (and its no-op) per append
        ul.append(b"%d" % i)
    w = clients[79 % 2]
    w.runtime.run(ul.writer.apply_retention())
    kept = _visible(w, lid)
    assert _first(w, lid) > 0  # retention did trim
    assert len(kept) >= 20
    assert [e.data for e in kept][-1] == b"79"


def test_max_bytes_keeps_at_least_the_limit_in_payload_bytes(make_cluster):
    cluster = make_cluster(4)
    w = cluster.client("w")
    ul = w.create_unbounded(3, 3, 2, retention=Retention(max_bytes=10_000))
    for i in range(500):
        ul.append(b"%099d" % i)  # 100 payload bytes each
    w.runtime.run(ul.writer.apply_retention())
    kept = sum(len(e.data) for e in _visible(w, ul.ledger_id))
    assert _first(w, ul.ledger_id) > 0
    # At least the limit, and at most the limit plus one sealed stretch (a quarter of
    # it) and the open one.
    assert 10_000 <= kept <= 10_000 + 2 * 2_500


def test_max_age_trims_after_a_takeover_whose_writer_never_appends(make_cluster):
    cluster = make_cluster(4)
    ul = cluster.client("a").create_unbounded(3, 3, 2, retention=Retention(max_age=1.0))
    for i in range(10):
        ul.append(b"%d" % i)
    ul.close()
    b = cluster.client("b")
    quiet = b.open_unbounded(ul.ledger_id)  # takes over (no-op at 10), appends nothing
    assert quiet.last_add_confirmed == 10
    wait_until(lambda: _first(b, ul.ledger_id) >= 11, pause=0.1)
    assert list(quiet.tail(0, timeout=0)) == []
    assert quiet.append(b"10 s later") == 11


class LedgerWrites(DelegatingStore):
    """A store that keeps every version of one ledger's metadata written through it."""

    def __init__(self, inner: MetadataStore, lid: int) -> None:
        super().__init__(inner)
        self.path = ledger_path(lid)
        self.written: list[LedgerMetadata] = []

    def set(self, path: str, data: bytes, version: int) -> int:
        out = self.inner.set(path, data, version)
        if path == self.path:
            self.written.append(LedgerMetadata.from_bytes(data, out))
        return out


@pytest.mark.parametrize("limits", [{"max_age": 1.0}, {"max_age": 1.0, "max_entries": 1000}])
def test_entries_already_older_than_max_age_at_a_quiet_takeover_go_at_its_first_seal(
    make_cluster, limits
):
    """The new writer dates the stretch it inherited by its newest entry's record (the
    old writer's clock), not by when it seals it: entries that aged out before the
    takeover are not kept max_age longer because a new writer came."""
    cluster = make_cluster(4)
    ul = cluster.client("a").create_unbounded(3, 3, 2, retention=Retention(**limits))
    for i in range(5):
        ul.append(b"%d" % i)
    last_written = time.time()
    ul.close()
    time.sleep(1.2)  # older than max_age now, and no writer trimmed them
    store = LedgerWrites(cluster.metadata.store, ul.ledger_id)
    cluster.metadata.store = store
    b = cluster.client("b")
    taken_over = time.time()
    quiet = b.open_unbounded(ul.ledger_id)  # a no-op at 5; appends nothing
    wait_until(lambda: _first(b, ul.ledger_id) >= 6, pause=0.05)
    sealed = [m for md in store.written for m in layout.marks(md)]
    assert sealed, "the takeover's writer sealed no stretch"
    assert max(m[2] for m in sealed) <= last_written < taken_over
    assert quiet.append(b"later") == 6


# -- a cursor holding retention back is visible ----------------------------------------------


def test_retention_held_back_by_a_cursor_is_a_metric_and_one_warning(make_cluster, caplog):
    cluster = make_cluster(4)
    w = cluster.client("w")
    ul = w.create_unbounded(3, 3, 2, retention=Retention(max_entries=20))
    ul.append(b"0")
    ul.commit("stuck", 0)
    with caplog.at_level(logging.WARNING, logger="embedlog"):
        for i in range(1, 200):
            ul.append(b"%d" % i)
        w.runtime.run(ul.writer.apply_retention())
    m = cluster.metrics()
    assert m[f"stream_{ul.ledger_id}_retention_held_entries"] >= 100
    assert m["retention_held_bytes"] > 0
    from embedlog.prometheus import families  # Prometheus's view (the test extra has it)

    exported = {
        (f.name, tuple(sorted(sample.labels.items()))): sample.value
        for f in families(cluster.metrics_snapshot())
        for sample in f.samples
    }
    key = ("embedlog_stream_retention_held_entries", (("ledger", str(ul.ledger_id)),))
    assert exported[key] >= 100
    warnings = [r for r in caplog.records if "holds back retention" in r.getMessage()]
    assert len(warnings) == 1
    assert _first(w, ul.ledger_id) <= 1
    ul.delete_cursor("stuck")
    w.runtime.run(ul.writer.apply_retention())
    assert cluster.metrics()[f"stream_{ul.ledger_id}_retention_held_entries"] == 0
    assert _first(w, ul.ledger_id) > 100


# -- smaller ---------------------------------------------------------------------------------


def _follower_of_ten_with_cursor_at_4(make_cluster):
    """A follower of a stream of entries 0-9 whose cursor "c" is at 4."""
    cluster = make_cluster(3)
    ul = cluster.client("w").create_unbounded(3, 3, 2)
    for i in range(10):
        ul.append(b"%d" % i)
    ul.commit("c", 4)
    return cluster.client("f").open_unbounded(ul.ledger_id, takeover=False)


def test_a_cursor_tail_knows_its_position_before_the_first_entry(make_cluster):
    tail = _follower_of_ten_with_cursor_at_4(make_cluster).tail(cursor="c")
    assert tail.position == 5
    assert next(tail).entry_id == 5
    tail.close()


def test_an_async_cursor_tail_knows_its_position_once_entered(make_cluster):
    follower = AsyncUnboundedLedger(_follower_of_ten_with_cursor_at_4(make_cluster))

    async def main() -> tuple[int, int, int]:
        async with follower.tail(cursor="c") as tail, follower.tail("latest") as latest:
            at = tail.position
            return at, (await tail.poll(1))[0].entry_id, latest.position

    assert asyncio.run(main()) == (5, 5, 10)


def test_a_displaced_writer_committing_past_its_lac_hears_of_the_takeover(make_cluster):
    cluster = make_cluster(3)
    first = cluster.client("first").create_unbounded(3, 3, 2)
    for i in range(3):
        first.append(b"%d" % i)
    second = cluster.client("second").open_unbounded(first.ledger_id)
    top = second.append(b"new term")
    with pytest.raises(InvalidTermError, match="took the stream over"):
        first.commit("c", top)
    first.commit("c", 2)  # what it knows stays committable
    assert first.cursors() == {"c": 2}


# -- found in review ---------------------------------------------------------------------------


def test_forward_commits_never_make_a_trim_decision_retry(make_cluster):
    """Consumers moving their cursors forward do not touch the trim point node: a
    decision that read a cursor at its old position stands, bounded by it."""
    cluster = make_cluster(3)
    ul = cluster.client("w").create_unbounded(3, 3, 2)
    for i in range(10):
        ul.append(b"%d" % i)
    store = cluster.metadata.store
    streams.commit(store, ul.ledger_id, "steady", 2, False)
    seen: list[dict[str, int]] = []

    def wanted(decided: int, cursors: dict[str, int]) -> int:
        seen.append(dict(cursors))
        streams.commit(store, ul.ledger_id, "steady", 6, False)  # forward, mid-decision
        return min([9, *(p + 1 for p in cursors.values())])

    assert streams.raise_trim_point(store, ul.ledger_id, wanted) == 3
    assert seen == [{"steady": 2}]


def test_a_decision_outrun_by_new_cursors_gives_up_and_trims_nothing(make_cluster):
    cluster = make_cluster(3)
    ul = cluster.client("w").create_unbounded(3, 3, 2)
    for i in range(10):
        ul.append(b"%d" % i)
    store = cluster.metadata.store
    calls = []

    def wanted(decided: int, cursors: dict[str, int]) -> int:
        calls.append(1)
        streams.commit(store, ul.ledger_id, f"new{len(calls)}", 0, False)  # a creation
        return 9

    assert streams.raise_trim_point(store, ul.ledger_id, wanted) == 0
    assert len(calls) == streams.DECIDE_ATTEMPTS


@pytest.mark.parametrize("kind", ["memory", "leveldb"])
def test_deleting_a_stream_removes_its_sink_records(kind, make_cluster):
    cluster = make_cluster(3, metadata_uri={"memory": "memory://", "leveldb": None}[kind])
    ul = cluster.client("w").create_unbounded(3, 3, 2)
    store = cluster.metadata.store
    sinks.write(store, ul.ledger_id, "sink-1", b"{}", None)
    assert sinks.read_all(store, ul.ledger_id)
    cluster.client("admin").delete_ledger(ul.ledger_id)
    assert sinks.read_all(store, ul.ledger_id) == {}
    assert store.children(f"{sinks.SINKS}/{ul.ledger_id:020d}") == []


class LostAfterLedgerDelete(DelegatingStore):
    """Every call after the delete of ``ledger``'s node fails as a lost connection,
    until ``healed``."""

    def __init__(self, inner: MetadataStore, ledger: int) -> None:
        super().__init__(inner)
        self.path = ledger_path(ledger)
        self.lost = self.healed = False

    def _check(self) -> None:
        if self.lost and not self.healed:
            raise MetadataError("ZooKeeper ConnectionLoss (the test's)")

    def delete(self, path: str, version: int = ANY_VERSION) -> None:
        self._check()
        self.inner.delete(path, version)
        self.lost = self.lost or path == self.path

    def children(self, path: str) -> list[str]:
        self._check()
        return self.inner.children(path)

    def get(self, path: str) -> tuple[bytes, int]:
        self._check()
        return self.inner.get(path)


def test_deleting_again_after_a_delete_failed_midway_removes_what_it_left(make_cluster):
    """The delete drops the ledger's node, then loses its connection before the cursors
    and sink records: the next delete of the id finds no ledger, and must still remove
    them (nothing else ever would), then say the ledger is gone."""
    cluster = make_cluster(3)
    ul = cluster.client("w").create_unbounded(3, 3, 2, name="orders")
    ul.append(b"x")
    ul.commit("c1", 0)
    sinks.write(cluster.metadata.store, ul.ledger_id, "sink-1", b"{}", None)
    lost = LostAfterLedgerDelete(cluster.metadata.store, ul.ledger_id)
    cluster.metadata.store = lost
    admin = cluster.client("admin")
    with pytest.raises(MetadataError):
        admin.delete_ledger(ul.ledger_id)
    lost.healed = True
    store = lost.inner
    cursors = f"{streams.CURSORS}/{ul.ledger_id:020d}"
    records = f"{sinks.SINKS}/{ul.ledger_id:020d}"
    assert store.children(cursors) == ["c1"]  # what the failed delete left
    assert store.children(records) == ["sink-1"]
    with pytest.raises(NoSuchLedgerInMetadataError):
        admin.delete_ledger(ul.ledger_id)
    assert not store.exists(cursors)
    assert store.children(records) == []
    assert "orders" not in admin.list_streams()
    admin.create_unbounded(3, 3, 2, name="orders")  # the name is free


class StaleFirstRead(DelegatingStore):
    """The first read of ``ledger``'s node says there is none: a lagging ZooKeeper server,
    or a delete racing the creation of an id another client just took."""

    def __init__(self, inner: MetadataStore, ledger: int) -> None:
        super().__init__(inner)
        self.path = ledger_path(ledger)
        self.stale = True

    def get(self, path: str) -> tuple[bytes, int]:
        if path == self.path and self.stale:
            self.stale = False
            raise NoNodeError(path)
        return self.inner.get(path)


def test_a_delete_that_reads_no_ledger_leaves_a_live_streams_cursors_alone(make_cluster):
    cluster = make_cluster(3)
    ul = cluster.client("w").create_unbounded(3, 3, 2)
    ul.append(b"x")
    ul.commit("c1", 0)
    sinks.write(cluster.metadata.store, ul.ledger_id, "sink-1", b"{}", None)
    store = cluster.metadata.store
    cluster.metadata.store = StaleFirstRead(store, ul.ledger_id)
    with pytest.raises(NoSuchLedgerInMetadataError):
        cluster.client("admin").delete_ledger(ul.ledger_id)
    assert store.children(f"{streams.CURSORS}/{ul.ledger_id:020d}") == ["c1"]
    assert store.children(f"{sinks.SINKS}/{ul.ledger_id:020d}") == ["sink-1"]
    assert ul.cursors() == {"c1": 0}


class DeletedBeneath(DelegatingStore):
    """Another delete drops ``ledger``'s node (and then fails) just before this client's
    delete of it."""

    def __init__(self, inner: MetadataStore, ledger: int) -> None:
        super().__init__(inner)
        self.path = ledger_path(ledger)

    def delete(self, path: str, version: int = ANY_VERSION) -> None:
        if path == self.path:
            self.inner.delete(path)
        self.inner.delete(path, version)


def test_a_delete_that_another_delete_overtook_still_removes_what_that_one_left(make_cluster):
    cluster = make_cluster(3)
    ul = cluster.client("w").create_unbounded(3, 3, 2)
    ul.append(b"x")
    ul.commit("c1", 0)
    store = cluster.metadata.store
    sinks.write(store, ul.ledger_id, "sink-1", b"{}", None)
    cluster.metadata.store = DeletedBeneath(store, ul.ledger_id)
    with pytest.raises(NoSuchLedgerInMetadataError):
        cluster.client("admin").delete_ledger(ul.ledger_id)
    assert not store.exists(f"{streams.CURSORS}/{ul.ledger_id:020d}")
    assert store.children(f"{sinks.SINKS}/{ul.ledger_id:020d}") == []


def test_a_bounded_ledger_is_fenced_before_it_is_deleted(make_cluster):
    """E3 WQ2 AQ2, the deleting client cut off from both bookies of entry 1's write set:
    the delete cannot fence that write set, so it deletes nothing and says so; once it
    can, the old handle's next add fails."""
    from embedlog.errors import LedgerFencedError, LedgerRecoveryError
    from embedlog.metadata.striping import write_set_bookies

    cluster = make_cluster(3)
    w = cluster.client("w")
    lh = w.create_ledger(3, 2, 2)
    lh.add(b"a")
    admin = cluster.client("admin", request_timeout=0.5)
    for b in write_set_bookies(1, lh.metadata.last_fragment[1], 2):
        cluster.network.block("admin", b)
    with pytest.raises(LedgerRecoveryError, match="was not deleted"):
        admin.delete_ledger(lh.ledger_id)
    assert admin.ledger_metadata(lh.ledger_id).ledger_id == lh.ledger_id  # still there
    cluster.network.heal()
    admin.delete_ledger(lh.ledger_id)
    with pytest.raises((LedgerDeletedError, LedgerFencedError)):
        lh.add(b"after the delete")


def test_a_followers_read_of_a_deleted_stream_says_it_was_deleted(make_cluster):
    cluster = make_cluster(3)
    ul = cluster.client("w").create_unbounded(3, 3, 2)
    for i in range(5):
        ul.append(b"%d" % i)
    follower = cluster.client("f").open_unbounded(ul.ledger_id, takeover=False)
    assert follower.read_last_add_confirmed() == 4
    cluster.client("admin").delete_ledger(ul.ledger_id)
    with pytest.raises(LedgerDeletedError, match="deleted"):
        follower.read(0, 1)


def test_retention_counts_acknowledged_appends_only(make_cluster):
    """Appends still in flight are not counted: if they never land (a takeover cuts
    them), retention must still have kept max_entries of what readers see."""
    cluster = make_cluster(3)
    w = cluster.client("w", request_timeout=0.5)
    ul = w.create_unbounded(3, 3, 2, retention=Retention(max_entries=8), fragment_max_entries=100)
    for i in range(101):
        ul.append(b"%d" % i)  # entry 100 opens the second fragment
    for b in ("bookie-1", "bookie-2", "bookie-3"):
        cluster.network.block("w", b)
    for i in range(10):
        ul.append_async(b"lost %d" % i)
    assert ul.writer._segment.entries == 1  # entry 100; the ten in flight do not count
    w.runtime.run(ul.writer.apply_retention())
    assert _first(w, ul.ledger_id) == 0
    w.close()
    cluster.network.heal()
    t = cluster.client("t").open_unbounded(ul.ledger_id)
    assert len(list(t.entries(t.first_entry_id()))) >= 8


def test_a_takeover_of_a_stream_with_retention_never_rolls_over_while_it_recovers(make_cluster):
    """Found by the simulator (`unbounded-streams` seeds 11, 20, 33): retention derives
    a fragment size from its limits (a quarter of max_entries: 1 here), and a takeover's
    recovery writer used it, rolling over and readying new fragments with TRIM ABOVE
    while it was still writing back the older term's acknowledged entries."""
    cluster = make_cluster(3)
    w = cluster.client("w")
    ul = w.create_unbounded(3, 3, 2, retention=Retention(max_entries=4), fragment_max_entries=100)
    cluster.network.block("w", "bookie-3")  # the LAFR stays behind: much to recover
    acked = [ul.append(b"%d" % i) for i in range(6)]
    takeover = cluster.client("t").open_unbounded(ul.ledger_id)
    assert takeover.writer.fragment_max_entries == 100  # the stream's own setting
    # Its write-back went to the last fragment as it was: no fragment was started.
    assert len(takeover.metadata.fragments) == 1
    first = takeover.first_entry_id()
    kept = {e.entry_id: e.data for e in takeover.entries(first)}
    assert kept == {i: b"%d" % i for i in acked if i >= first}
    assert first <= acked[-1]  # at least the newest acknowledged entry is kept


def _tail_in_a_thread(ul) -> tuple[threading.Thread, list[object]]:
    """Iterate ``ul.tail(0)`` without an idle timeout in a thread; what it yielded, then
    the exception that ended it."""
    out: list[object] = []

    def follow() -> None:
        try:
            for entry in ul.tail(0, timeout=None):
                out.append(entry.data)
        except Exception as exc:
            out.append(exc)

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    return thread, out


def test_a_writers_own_tail_ends_when_its_stream_is_deleted(make_cluster):
    """The writer's handle tails its own stream and appends nothing more: it waited on its
    own LAC for ever after another client deleted the stream."""
    cluster = make_cluster(3)
    ul = cluster.client("w").create_unbounded(3, 3, 2, name="doomed")
    ul.append(b"only")
    thread, out = _tail_in_a_thread(ul)
    wait_until(lambda: out == [b"only"])
    cluster.client("admin").delete_ledger(ul.ledger_id)
    thread.join(IDLE)
    assert not thread.is_alive(), "the writer's tail still waits on a deleted stream"
    assert out[0] == b"only" and isinstance(out[1], LedgerDeletedError)


def test_a_displaced_writers_own_tail_says_who_took_over(make_cluster):
    """Another client takes the stream over and appends: the old writer's tail, which
    knows its own term's LAC only, waited for ever; it ends naming the new term."""
    cluster = make_cluster(3)
    ul = cluster.client("w1").create_unbounded(3, 3, 2, name="s")
    ul.append(b"by w1")
    thread, out = _tail_in_a_thread(ul)
    wait_until(lambda: out == [b"by w1"])
    new = cluster.client("w2").open_unbounded("s")
    new.append(b"by w2")
    thread.join(IDLE)
    assert not thread.is_alive(), "the displaced writer's tail still waits"
    assert out[0] == b"by w1" and isinstance(out[1], InvalidTermError)
    assert "term 2" in str(out[1]) and "takeover=False" in str(out[1])


def test_a_closed_handle_reads_but_neither_follows_commits_nor_trims(make_cluster):
    """After ``close()``: a tail ended at once with nothing (5 entries were there), and a
    commit and a trim went through; each now says the handle was closed. What is stored
    can still be read, as from a closed BookKeeper ledger handle."""
    from embedlog.errors import LedgerClosedError

    cluster = make_cluster(3)
    ul = cluster.client("w").create_unbounded(3, 3, 2, fragment_max_entries=2)
    for i in range(5):
        ul.append(b"%d" % i)
    ul.close()
    for call in (
        lambda: list(ul.tail(0, timeout=1)),
        lambda: ul.commit("c", 3),
        lambda: ul.trim(4),
        lambda: ul.delete_cursor("c"),
    ):
        with pytest.raises(LedgerClosedError, match=r"was closed: .* needs an open handle"):
            call()
    assert [e.data for e in ul.read(0, 4)] == [b"0", b"1", b"2", b"3", b"4"]
    assert ul.first_entry_id() == 0 and ul.cursors() == {}


def test_a_deleted_streams_cursors_are_not_listed_as_none(make_cluster):
    """``cursors()`` of a deleted stream returned {} and ``delete_cursor`` succeeded, while
    every other call said the stream was deleted."""
    cluster = make_cluster(3)
    ul = cluster.client("w").create_unbounded(3, 3, 2)
    ul.append(b"x")
    ul.commit("c", 0)
    follower = cluster.client("f").open_unbounded(ul.ledger_id, takeover=False)
    assert follower.cursors() == {"c": 0}
    cluster.client("admin").delete_ledger(ul.ledger_id)
    with pytest.raises(LedgerDeletedError):
        follower.cursors()
    with pytest.raises(LedgerDeletedError):
        follower.delete_cursor("c")
