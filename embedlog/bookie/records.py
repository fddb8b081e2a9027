"""The bookie's journal records: how each kind is laid out, and how replay applies it.

A record's first byte says its kind (embedlog/bookie/journal_replay.py frames and checks the
record as a whole):

- ``A`` ledger entry | entry: one add;
- ``B`` ledger | ADD_BATCH body: several entries of one ledger, as pack_entries frames them;
- ``S`` ledger | state JSON: a ledger's state (LedgerInfo) set;
- ``T`` ledger entry | state JSON: an unbounded ledger's truncation: the entries above
  ``entry`` dropped and the state, whose truncated_term says so, set in one record.

The request path writes them (embedlog/bookie/adds.py, embedlog/bookie/base.py), the
boot replays them (embedlog/bookie/boot.py). A record of a ledger the bookie dropped
(tombstones.py) is skipped: replay must not bring a deleted ledger back.
"""

from __future__ import annotations

import struct

from embedlog.bookie.index import LedgerInfo
from embedlog.bookie.storage import LedgerStorage
from embedlog.wire.messages import unpack_entries

_ADD = struct.Struct(">cqq")
_BATCH = struct.Struct(">cq")
_STATE = struct.Struct(">cq")
_TRUNCATE = struct.Struct(">cqq")
_TRUNCATE_IDS = struct.Struct(">cqqI")  # a truncation that drops only the ids listed
_ID = struct.Struct(">q")
_KINDS = (b"A", b"B", b"S", b"T", b"U")  # each starts with its ledger's id after the kind


# Each kind's fixed head, which a record of that kind always extends past (an entry, a
# batch or a state follows it).
_HEADS = {
    ord("A"): _ADD.size,
    ord("B"): _BATCH.size,
    ord("S"): _STATE.size,
    ord("T"): _TRUNCATE.size,
    ord("U"): _TRUNCATE_IDS.size,
}


def well_formed(kind: int, length: int) -> bool:
    """Whether a payload of ``length`` bytes whose first byte is ``kind`` can be a record
    the journal wrote.

    Replay's search for an intact record behind a bad one asks this besides the CRC, so
    that a frame-like run of bytes inside an entry is not taken for a record: an entry
    id of 4 followed by a LAC of -1 reads as a frame of length 4 holding four 0xff
    bytes, whose CRC32C is 0xffffffff, and would make a torn tail look like corruption
    (a suspicious boot; found by the simulator, seed 864 of ``bounded-races``).
    """
    head = _HEADS.get(kind)
    return head is not None and length > head


def add_prefix(ledger_id: int, entry_id: int) -> bytes:
    """What comes before the entry in an add's record (the journal frames the two as one,
    without joining them)."""
    return _ADD.pack(b"A", ledger_id, entry_id)


def split_add(payload: bytes) -> tuple[int, int, bytes]:
    """An add's record (``A``) read back: its ledger, entry id and entry."""
    _, lid, eid = _ADD.unpack_from(payload)
    return lid, eid, payload[_ADD.size :]


def batch_prefix(ledger_id: int) -> bytes:
    """What comes before the ADD_BATCH body in a batch's record."""
    return _BATCH.pack(b"B", ledger_id)


def state_record(ledger_id: int, info: LedgerInfo) -> bytes:
    return _STATE.pack(b"S", ledger_id) + info.to_json()


def truncate_record(
    ledger_id: int, at: int, info: LedgerInfo, only: frozenset[int] | None = None
) -> bytes:
    """The ledger's entries above ``at`` dropped (``only`` those listed, when given: the
    older terms' ones, bookie/truncation.py), and ``info`` (which says so) set."""
    if only is None:
        return _TRUNCATE.pack(b"T", ledger_id, at) + info.to_json()
    ids = sorted(only)
    head = _TRUNCATE_IDS.pack(b"U", ledger_id, at, len(ids))
    return head + b"".join(_ID.pack(e) for e in ids) + info.to_json()


def replay(storage: LedgerStorage, payload: bytes) -> None:
    """Apply one journal record to ``storage`` (a record of another kind, or of a ledger
    the bookie dropped, changes nothing)."""
    kind = payload[:1]
    if kind in _KINDS and storage.dropped(_ID.unpack_from(payload, 1)[0]):
        # The drop's index batch moved the checkpoint past every record the ledger had
        # then, and a tombstone admits no new one: this is defence in depth.
        return
    if kind == b"A":
        storage.put(*split_add(payload))
    elif kind == b"B":
        _, lid = _BATCH.unpack_from(payload)
        storage.put_many(lid, dict(unpack_entries(payload[_BATCH.size :])))
    elif kind == b"S":
        _, lid = _STATE.unpack_from(payload)
        storage.set_info(lid, LedgerInfo.from_json(payload[_STATE.size :]))
    elif kind == b"T":
        # The checkpoint is before this record, so its cut may not have reached
        # the index: redo it (a no-op if it had), in journal order with the adds.
        _, lid, eid = _TRUNCATE.unpack_from(payload)
        storage.set_info(lid, LedgerInfo.from_json(payload[_TRUNCATE.size :]))
        storage.cut_replayed(lid, "above", eid)
    elif kind == b"U":
        _, lid, eid, n = _TRUNCATE_IDS.unpack_from(payload)
        pos = _TRUNCATE_IDS.size
        only = frozenset(_ID.unpack_from(payload, pos + i * _ID.size)[0] for i in range(n))
        storage.set_info(lid, LedgerInfo.from_json(payload[pos + n * _ID.size :]))
        storage.cut_replayed(lid, "above", eid, only)
