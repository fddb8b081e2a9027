"""Idempotent appends under the simulator (``unbounded-dedup``, workload_dedup.py): the
oracle's ``AppendedOncePerMsgId``, a writer that forgets the ids earlier terms took
(caught at a pinned seed), and how ``NoNegativeForAckedEntry`` judges a negative when an
acknowledgement comes through a later term than the add the bookie acked."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from seed_search import caught_then_clean, patched

from embedlog.testing.oracle_unbounded import StreamOracle
from embedlog.unbounded.appending import StreamAppends
from embedlog.unbounded.dedup import DedupWindow
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import FLAG_TERM, TERM, Digester, DigestType
from embedlog.wire.messages import OpCode, ReadFlags, Request, Response

ONCE = "AppendedOncePerMsgId"
# The first seed of `unbounded-dedup` at which the mutant below stores a message twice.
FORGETS_FIRST = 68
SEARCH = 300


@contextmanager
def rebuild_forgets_the_window() -> Iterator[None]:
    """A writer that took the stream over starts with no ids instead of reading back the
    ones the window's entries carry: a retry of an append the takeover recovered is
    appended again."""

    async def forgets(self: StreamAppends) -> DedupWindow:
        return DedupWindow(self._window_len)

    with patched(StreamAppends, "_rebuild", forgets):
        yield


def test_a_writer_that_forgets_earlier_terms_ids_is_caught():
    caught_then_clean(
        rebuild_forgets_the_window,
        "unbounded-dedup",
        FORGETS_FIRST,
        SEARCH,
        ONCE,
        "check.msg_id_once",
    )


def _oracle() -> tuple[StreamOracle, Counter[str]]:
    counts: Counter[str] = Counter()
    return StreamOracle(8, lambda *_: None, lambda *_: True, counts), counts


def _names(o: StreamOracle) -> list[str]:
    return [v.invariant for v in o.violations]


def test_a_message_stored_twice_violates_once_per_msg_id_and_only_that():
    o, counts = _oracle()
    o.append("c0@t1", b"w0")
    o.append_by_msg_id("p0#0", b"m0")
    o.append("c0@t1", b"w1")
    o.final_stream(7, [(0, b"w0"), (1, b"m0"), (2, b"w1"), (3, b"m0")], 0, "checker", 2)
    assert _names(o) == [ONCE]
    assert "7:[1, 3]" in o.violations[0].detail
    assert counts["check.msg_id_once"] == 1


def test_a_message_stored_once_or_not_at_all_holds():
    o, counts = _oracle()
    for i, p in enumerate((b"m0", b"m1", b"m2")):
        o.append_by_msg_id(f"p0#{i}", p)
    o.final_stream(7, [(0, b"m0"), (1, b"m2")], 0, "checker", 2)  # m1's outcome stayed unknown
    assert _names(o) == []
    assert counts["check.msg_id_once"] == 2


def test_a_plain_writers_payload_twice_is_the_prefix_rule_not_this_one():
    o, _ = _oracle()
    o.append("c0@t1", b"w0")
    o.final_stream(7, [(0, b"w0"), (1, b"w0")], 0, "checker", 2)
    assert _names(o) == ["StreamIsPrefixOfEachWriter"]


def test_with_producers_sharing_a_writer_its_acks_may_skip_ids_but_never_go_back():
    o, _ = _oracle()
    o.append_by_msg_id("p0#0", b"m0")  # producers share the writers: gaps are theirs
    o.stream_acknowledged(7, 0, b"w0", 1, "c0@t1")
    o.stream_acknowledged(7, 2, b"w1", 1, "c0@t1")  # id 1 went to a producer
    assert _names(o) == []
    o.stream_acknowledged(7, 1, b"w2", 1, "c0@t1")
    assert _names(o) == ["NoOutOfOrderEntries"]


def test_without_producers_a_writers_acks_are_consecutive():
    o, _ = _oracle()
    o.stream_acknowledged(7, 0, b"w0", 1, "c0@t1")
    o.stream_acknowledged(7, 2, b"w1", 1, "c0@t1")
    assert _names(o) == ["NoOutOfOrderEntries"]


def test_an_id_below_where_a_term_began_is_an_earlier_terms_entry():
    o, _ = _oracle()
    o.took_over(7, 3, 10, "t0")
    assert o.before_term(7, 3, 9)
    assert not o.before_term(7, 3, 10)
    assert not o.before_term(7, 4, 9)


# -- NoNegativeForAckedEntry when an acknowledgement comes through a later term ----------------

DIGEST = Digester(DigestType.CRC32C, b"")
LID = 7


def _stream_entry(eid: int, term: int, payload: bytes) -> bytes:
    return DIGEST.pack(LID, eid, -1, TERM.pack(term) + payload, FLAG_TERM)


def _stream_oracle() -> tuple[StreamOracle, Counter[str]]:
    counts: Counter[str] = Counter()
    return StreamOracle(DIGEST.digest_len, lambda *_: None, lambda *_: True, counts), counts


def _add(o: StreamOracle, bookie: str, eid: int, payload: bytes, *, made: int, sent: int) -> None:
    """``bookie`` acknowledges an add of ``eid`` (an entry term ``made`` made) sent in
    term ``sent`` (a takeover's write-back sends an older term's entry)."""
    req = Request(OpCode.ADD, 1, LID, eid, term=sent, body=_stream_entry(eid, made, payload))
    o.answered("w", bookie, req, Response.to(req, StatusCode.EOK, entry_id=eid, term=sent))


def _negative(o: StreamOracle, bookie: str, eid: int, term: int) -> None:
    req = Request(OpCode.READ, 2, LID, eid, ReadFlags.RECOVERY, term=term)
    o.answered("r", bookie, req, Response.to(req, StatusCode.ENOENTRY, entry_id=eid, term=term))


def test_a_negative_to_a_later_terms_recovery_then_its_writers_ack_is_a_violation():
    o, _ = _stream_oracle()
    _add(o, "b5", 1, b"m", made=1, sent=1)
    _negative(o, "b5", 1, term=2)  # another takeover's recovery read: nobody acked it yet
    o.stream_acknowledged(LID, 1, b"m", 1, "c0@t1")  # term 1's writer hears of its ack
    assert _names(o) == ["NoNegativeForAckedEntry"]


def test_a_negative_to_the_acknowledging_terms_own_recovery_for_an_older_copy_is_not():
    # seed 4326 of unbounded-dedup: bookie-5 acked p0's message in term 1; term 2's
    # takeover cut it with a no-op journaled just before a crash (no answer: the oracle
    # never saw the cut); term 3's recovery read got ENOENTRY from it, recovered the
    # message from another bookie and wrote it back, and p0's retry by msg_id was then
    # acknowledged its id through term 3.
    o, counts = _stream_oracle()
    _add(o, "b5", 1, b"m", made=1, sent=1)
    _negative(o, "b5", 1, term=3)
    o.stream_acknowledged(LID, 1, b"m", 3, "p0#0")
    assert _names(o) == []
    assert counts["check.negative_before_own_recovery"] == 1


def test_a_negative_after_acking_the_acknowledging_terms_write_back_is_a_violation():
    o, _ = _stream_oracle()
    _add(o, "b5", 1, b"m", made=1, sent=3)  # term 3's write-back of term 1's entry
    _negative(o, "b5", 1, term=3)
    o.stream_acknowledged(LID, 1, b"m", 3, "p0#0")
    assert _names(o) == ["NoNegativeForAckedEntry"]


def test_once_acknowledged_a_negative_judges_at_once_by_the_same_rule():
    o, _ = _stream_oracle()
    o.append_by_msg_id("p0#0", b"m")
    o.stream_acknowledged(LID, 1, b"m", 3, "p0#0")
    _add(o, "b5", 1, b"m", made=1, sent=1)
    _negative(o, "b5", 1, term=3)
    assert _names(o) == []
    _add(o, "b2", 1, b"m", made=1, sent=1)
    _negative(o, "b2", 1, term=4)  # a later term's read: term 3 had acknowledged it
    assert _names(o) == ["NoNegativeForAckedEntry"]
