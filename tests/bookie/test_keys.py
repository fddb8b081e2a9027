"""Every request that changes a ledger's state proves its master key (bookie/keys.py)."""

from __future__ import annotations

from typing import Any

import pytest
from harness import KEY, entry

from embedlog.bookie.index import LedgerInfo
from embedlog.bookie.keys import MASTER_KEY_SIZE, KeyVerdict, key_verdict, needs_key
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import master_key
from embedlog.wire.messages import (
    AddFlags,
    OpCode,
    ReadFlags,
    Request,
    TrimFlags,
    pack_entries,
)

OTHER = master_key(b"someone else")
HELD = LedgerInfo(master_key=KEY.hex())


def req(op: OpCode, key: bytes = KEY, **kw: Any) -> Request:
    return Request(op, 1, 5, kw.pop("entry_id", -1), master_key=key, **kw)


NEEDS_KEY = [
    (req(OpCode.ADD), True),
    (req(OpCode.ADD, flags=AddFlags.RECOVERY), True),
    (req(OpCode.ADD_BATCH), True),
    (req(OpCode.WRITE_LAC), True),
    (req(OpCode.TRIM), True),
    (req(OpCode.TRIM, flags=TrimFlags.ABOVE, term=3), True),
    (req(OpCode.DELETE_LEDGER), True),
    (req(OpCode.READ, flags=ReadFlags.FENCE), True),
    (req(OpCode.READ, entry_id=4, flags=ReadFlags.FENCE | ReadFlags.RECOVERY), True),
    (req(OpCode.READ, term=2), True),  # raises the bookie's term
    (req(OpCode.READ, entry_id=4), False),  # plain read: changes nothing
    (req(OpCode.READ, entry_id=4, flags=ReadFlags.RECOVERY), False),  # recovery read, no fence
    (req(OpCode.READ_LAC), False),
    (req(OpCode.READ_LAC, timeout_ms=100), False),
    (req(OpCode.LIST_ENTRIES), False),
]


@pytest.mark.parametrize(("request_", "expected"), NEEDS_KEY)
def test_which_requests_need_the_key(request_: Request, expected: bool) -> None:
    assert needs_key(request_) is expected


VERDICTS = [
    # (request, what the bookie holds of the ledger, verdict)
    (req(OpCode.ADD), HELD, KeyVerdict.PROVEN),
    (req(OpCode.ADD, OTHER), HELD, KeyVerdict.REFUSED),
    (req(OpCode.ADD, b""), HELD, KeyVerdict.REFUSED),
    (req(OpCode.ADD, KEY[:-1]), HELD, KeyVerdict.REFUSED),  # a prefix of the key
    (req(OpCode.ADD, KEY + b"\0"), HELD, KeyVerdict.REFUSED),  # the key and more
    (req(OpCode.ADD), None, KeyVerdict.FIRST),  # binds on first contact
    (req(OpCode.ADD, b""), None, KeyVerdict.REFUSED),  # an empty key never creates state
    (req(OpCode.ADD, b"k"), None, KeyVerdict.REFUSED),  # no master key is 1 byte
    (req(OpCode.ADD, b"k" * 64), None, KeyVerdict.REFUSED),
    # A record without a key (BP-46, metadata without one) is nobody's to claim.
    (req(OpCode.ADD), LedgerInfo(), KeyVerdict.REFUSED),
    (req(OpCode.READ, flags=ReadFlags.FENCE), LedgerInfo(fenced=True), KeyVerdict.REFUSED),
    (req(OpCode.READ, b"", flags=ReadFlags.FENCE), None, KeyVerdict.REFUSED),
    (req(OpCode.READ, b"", flags=ReadFlags.FENCE), HELD, KeyVerdict.REFUSED),
    (req(OpCode.READ, flags=ReadFlags.FENCE), None, KeyVerdict.FIRST),
    (req(OpCode.READ, OTHER, term=2**63 - 1), HELD, KeyVerdict.REFUSED),
    (req(OpCode.READ, b"", term=2**63 - 1), None, KeyVerdict.REFUSED),
    (req(OpCode.WRITE_LAC, b"", entry_id=1000), HELD, KeyVerdict.REFUSED),
    (req(OpCode.WRITE_LAC, entry_id=1000), HELD, KeyVerdict.PROVEN),
    (req(OpCode.TRIM, b"", entry_id=3), HELD, KeyVerdict.REFUSED),
    (req(OpCode.TRIM, b"", flags=TrimFlags.ABOVE, term=3), None, KeyVerdict.REFUSED),
    (req(OpCode.DELETE_LEDGER, b""), HELD, KeyVerdict.REFUSED),
    (req(OpCode.DELETE_LEDGER, OTHER), HELD, KeyVerdict.REFUSED),
    (req(OpCode.DELETE_LEDGER), HELD, KeyVerdict.PROVEN),
    # Reads that change nothing stay keyless, whatever key they carry.
    (req(OpCode.READ, b"", entry_id=0), HELD, KeyVerdict.KEYLESS),
    (req(OpCode.READ, OTHER, entry_id=0), HELD, KeyVerdict.KEYLESS),
    (req(OpCode.READ_LAC, b""), None, KeyVerdict.KEYLESS),
    (req(OpCode.LIST_ENTRIES, b""), HELD, KeyVerdict.KEYLESS),
]


@pytest.mark.parametrize(("request_", "held", "expected"), VERDICTS)
def test_key_verdicts(request_: Request, held: LedgerInfo | None, expected: KeyVerdict) -> None:
    assert key_verdict(request_, held) is expected


def test_master_keys_are_the_size_the_bookie_requires() -> None:
    assert len(master_key(b"")) == len(master_key(b"x" * 1000)) == MASTER_KEY_SIZE


# -- the bookie's handler: a refused request changes nothing ----------------------------------

LID, UNKNOWN = 5, 6


def state_changes(lid: int, key: bytes) -> list[Request]:
    """Every kind of request that changes ``lid``'s state, carrying ``key``."""
    flags_read = ReadFlags.FENCE | ReadFlags.RECOVERY
    batch = pack_entries([(3, entry(lid, 3)), (4, entry(lid, 4))])
    return [
        Request(OpCode.ADD, 0, lid, 3, master_key=key, body=entry(lid, 3)),
        Request(OpCode.ADD, 0, lid, 3, AddFlags.RECOVERY, master_key=key, body=entry(lid, 3)),
        Request(OpCode.ADD_BATCH, 0, lid, 3, master_key=key, body=batch),
        Request(OpCode.READ, 0, lid, -1, ReadFlags.FENCE, master_key=key),
        Request(OpCode.READ, 0, lid, 0, flags_read, master_key=key),
        Request(OpCode.READ, 0, lid, -1, term=2**63 - 1, master_key=key),
        Request(OpCode.WRITE_LAC, 0, lid, 1000, master_key=key),
        Request(OpCode.TRIM, 0, lid, 2, master_key=key),
        Request(OpCode.TRIM, 0, lid, 0, TrimFlags.ABOVE, term=7, master_key=key, body=b"\x04"),
        Request(OpCode.DELETE_LEDGER, 0, lid, master_key=key),
    ]


BAD_KEYS = [b"", OTHER, KEY[:-1], b"k" * 64]


def add(h: Any, lid: int, eid: int) -> int:
    """Entry ``eid`` added with the key, carrying LAC ``eid - 1``; the answer's status."""
    return int(h.request(OpCode.ADD, lid, eid, body=entry(lid, eid, lac=eid - 1)).status)


def snapshot(h: Any) -> tuple[Any, ...]:
    b = h.bookie
    infos = {lid: b.ledger_info(lid).to_json() for lid in b.storage.ledger_ids()}
    return infos, {lid: b.ledger_entries(lid) for lid in infos}, b.journal.lsn


@pytest.mark.parametrize("key", BAD_KEYS, ids=["empty", "other", "short", "long"])
def test_every_state_change_without_the_key_is_refused_and_changes_nothing(
    harness: Any, key: bytes
) -> None:
    h = harness()
    h.boot()
    for eid in range(3):
        assert add(h, LID, eid) == StatusCode.EOK
    before = snapshot(h)
    assert UNKNOWN not in before[0]
    requests = state_changes(LID, key)
    if len(key) != MASTER_KEY_SIZE:  # a well-formed key binds an unknown ledger (first contact)
        requests += state_changes(UNKNOWN, key)
    for request in requests:
        resp = h.run(h.serve(request))
        assert resp.status == StatusCode.EUA, request
        assert snapshot(h) == before, request
    # Nor after a crash: no record of any of them reached the journal.
    h.crash()
    h.boot()
    assert snapshot(h)[:2] == before[:2]
    assert [h.read(LID, e).status for e in range(3)] == [StatusCode.EOK] * 3
    assert add(h, LID, 3) == StatusCode.EOK  # not fenced, no term raised


def test_the_same_requests_with_the_key_are_served(harness: Any) -> None:
    h = harness()
    h.boot()
    for eid in range(3):
        add(h, LID, eid)
    answers = [h.run(h.serve(r)).status for r in state_changes(LID, KEY)]
    assert StatusCode.EUA not in answers
    assert answers[-1] == StatusCode.EOK and h.bookie.ledger_info(LID) is None  # deleted
    # A fence with the key creates an unknown ledger, bound to that key.
    assert h.read(UNKNOWN, -1, flags=ReadFlags.FENCE).status == StatusCode.EOK
    assert h.bookie.ledger_info(UNKNOWN).master_key == KEY.hex()
    assert h.read(UNKNOWN, -1, flags=ReadFlags.FENCE, master_key=OTHER).status == StatusCode.EUA


def test_reads_that_change_nothing_need_no_key(harness: Any) -> None:
    h = harness()
    h.boot()
    h.add(LID, 0)
    assert h.read(LID, 0, master_key=b"").status == StatusCode.EOK
    assert h.read(LID, 0, flags=ReadFlags.RECOVERY, master_key=b"").status == StatusCode.EOK
    assert h.request(OpCode.READ_LAC, LID, master_key=b"").status == StatusCode.EOK
    assert h.request(OpCode.LIST_ENTRIES, LID, master_key=b"").status == StatusCode.EOK


def test_a_record_without_a_key_is_claimed_by_no_request(harness: Any) -> None:
    h = harness()
    h.boot()
    h.run(h.bookie.set_ledger_state(UNKNOWN, limbo=True))  # as BP-46 does without a key
    before = snapshot(h)
    for request in state_changes(UNKNOWN, KEY):
        assert h.run(h.serve(request)).status == StatusCode.EUA, request
    assert snapshot(h) == before
    assert h.bookie.ledger_info(UNKNOWN).master_key == ""
