"""Requests and responses between clients and bookies, and their binary frames.

One codec serves every transport: the in-process transport hands the encoded
bytes to the bookie exactly as the TCP transport sends them, so a frame is
decoded and validated the same way whichever path it took.

Frame layout (big-endian), after the transport's own length prefix:

request : version u8 | op u8 | txn u64 | ledger i64 | entry i64 | flags u8
          | term i64 | lafr i64 | timeout_ms u32 | key_len u16 | master_key | body
response: version u8 | op u8 | txn u64 | status i16 | ledger i64 | entry i64
          | lac i64 | last_entry i64 | term i64 | lafr i64 | body

``lafr`` is the last add fully replicated (every bookie of the write set
confirmed it): unbounded ledgers recover forward from it.
"""

from __future__ import annotations

import enum
import struct

from attrs import field, frozen

PROTOCOL_VERSION = 1

_REQ = struct.Struct(">BBQqqBqqIH")
_RESP = struct.Struct(">BBQhqqqqqq")


class FrameError(ValueError):
    """A frame that cannot be decoded: truncated, wrong version or unknown op."""


class OpCode(enum.IntEnum):
    ADD = 1
    READ = 2  # entry_id -1 with FENCE: fence and report LAC (BookKeeper's fencing LAC read)
    READ_LAC = 3  # non-fencing LAC read; long-poll when timeout_ms > 0
    WRITE_LAC = 4  # explicit LAC, sent by an idle writer
    LIST_ENTRIES = 5  # BP-34: the entries of a ledger this bookie holds
    DELETE_LEDGER = 6
    TRIM = 7  # unbounded ledgers: drop entries below entry_id
    # Several entries of one ledger for one bookie (body: pack_entries; entry_id is the
    # first's). Each is an ADD of its own to the bookie, and the answer's body holds one
    # result per entry, in the same order (pack_results). Only the per-request costs of
    # the transport are shared.
    ADD_BATCH = 8
    # Entries entry_id, entry_id + stride, ... of one ledger from one bookie (body:
    # pack_read_ask). The answer (EOK) holds the longest run of them, in order, that the
    # bookie holds and that fits its bounds (body: pack_entries); an entry it leaves out
    # is no answer about that entry, never a negative. Changes nothing: no key, no flags.
    READ_BATCH = 9


_OPS = {op.value: op for op in OpCode}  # decoding by dict: OpCode(n) is slow on the hot path

# Flag bits are plain ints, not enum.IntFlag: they are tested on every request, and an
# IntFlag operation builds a new enum member each time (a measurable share of an add).


class AddFlags:
    NONE = 0
    RECOVERY = 1  # accepted on a fenced ledger (ledger recovery writes back)
    TRUNCATE = 2  # unbounded ledgers: delete every entry above this one
    NOOP = 4  # the entry is a no-op (informational; readers also see it in the entry header)


class ReadFlags:
    NONE = 0
    FENCE = 1  # fence the ledger before answering (creates it if unknown)
    RECOVERY = 2  # a ledger-recovery read


class TrimFlags:
    NONE = 0
    # Unbounded ledgers: delete the entries ABOVE entry_id, at most once per term (the
    # request's term, which must not be below the bookie's). A writer sends it to each
    # bookie of a new fragment before the fragment's first entry: a bookie that missed a
    # takeover's truncate no-op may hold an older term's entries at the fragment's ids.
    ABOVE = 1


NO_TERM = -1
# The term a delete raises a stream to before it deletes anything (unbounded/deletion.py):
# above any writer's, and a refusal that carries it tells the writer its stream is being
# deleted, not taken over. No takeover reaches it (2**62 takeovers).
DELETED_TERM = 2**62

ENTRY_FRAME = struct.Struct(">qI")  # an ADD_BATCH body's entry: id, length (then the entry)
_RESULT = struct.Struct(">hq")
_READ_ASK = struct.Struct(">III")  # a READ_BATCH body: count, stride, max bytes
RESULT_SIZE = _RESULT.size  # one entry's (status, term) in an ADD_BATCH answer


def frame_entry(entry_id: int, entry: bytes) -> bytes:
    """One entry as an ADD_BATCH body holds it: entry id, length, entry."""
    return ENTRY_FRAME.pack(entry_id, len(entry)) + entry


def pack_entries(entries: list[tuple[int, bytes]]) -> bytes:
    """An ADD_BATCH body (and a READ_BATCH answer's): ``frame_entry`` of each entry, one
    after the other, with one copy of each entry."""
    parts: list[bytes] = []
    for entry_id, entry in entries:
        parts += (ENTRY_FRAME.pack(entry_id, len(entry)), entry)
    return b"".join(parts)


def unpack_entries(body: bytes | memoryview) -> list[tuple[int, bytes]]:
    """(entry id, entry) pairs of an ADD_BATCH body (FrameError if it is not whole)."""
    data = body if isinstance(body, bytes) else bytes(body)  # bytes slice in one copy
    entries: list[tuple[int, bytes]] = []
    append, head, size, end = entries.append, ENTRY_FRAME.unpack_from, ENTRY_FRAME.size, len(data)
    pos = 0
    while pos < end:
        if pos + size > end:
            raise FrameError("batch body truncated inside an entry's id and length")
        entry_id, n = head(data, pos)
        pos += size
        if pos + n > end:
            raise FrameError("batch body truncated inside an entry")
        append((entry_id, data[pos : pos + n]))
        pos += n
    return entries


def pack_results(results: list[tuple[int, int]]) -> bytes:
    """An ADD_BATCH answer's body: (status, term) per entry, in entry order."""
    return b"".join(_RESULT.pack(status, term) for status, term in results)


def unpack_results(body: bytes | memoryview) -> list[tuple[int, int]]:
    if len(body) % _RESULT.size:
        raise FrameError(f"batch answer body of {len(body)} bytes is not whole results")
    return list(_RESULT.iter_unpack(body))  # type: ignore[arg-type]


def pack_read_ask(count: int, stride: int, max_bytes: int) -> bytes:
    """A READ_BATCH body: how many entries, the step between their ids, and the most bytes
    of entries the answer may hold (the bookie lowers both to its own bounds)."""
    return _READ_ASK.pack(count, stride, max_bytes)


def unpack_read_ask(body: bytes | memoryview) -> tuple[int, int, int]:
    """(count, stride, max bytes) of a READ_BATCH body; FrameError unless it is exactly one
    ask with each of them at least 1."""
    if len(body) != _READ_ASK.size:
        raise FrameError(f"read batch body of {len(body)} bytes, not {_READ_ASK.size}")
    count, stride, max_bytes = _READ_ASK.unpack(body)
    if not (count and stride and max_bytes):
        raise FrameError(f"read batch asks for {count} entries, stride {stride}, {max_bytes} bytes")
    return count, stride, max_bytes


def _request_kind(req: Request) -> str:
    if req.op in (OpCode.ADD, OpCode.ADD_BATCH):
        return "recovery_add" if req.flags & AddFlags.RECOVERY else "add"
    if req.op == OpCode.READ_BATCH:
        return "read"
    if req.op == OpCode.READ:
        if req.entry_id < 0 and (req.flags & ReadFlags.FENCE or req.term != NO_TERM):
            return "fence"
        if req.flags & ReadFlags.RECOVERY:
            return "recovery_read"
        return "read"
    return req.op.name.lower()


@frozen
class Request:
    op: OpCode
    txn: int
    ledger_id: int
    entry_id: int = -1
    flags: int = 0
    term: int = NO_TERM
    timeout_ms: int = 0
    master_key: bytes = b""
    body: bytes = b""
    lafr: int = -1

    # ``kind``, worked out once: the simulator's network and aims ask each request's
    # kind some five times (1.3% of a stream seed's CPU, py-spy).
    _kind: str | None = field(default=None, init=False, eq=False, repr=False)

    @property
    def kind(self) -> str:
        """The request kind that fault injection speaks of (API.md ``drop_next``)."""
        kind = self._kind
        if kind is None:
            kind = _request_kind(self)
            object.__setattr__(self, "_kind", kind)
        return kind

    def encode(self) -> bytes:
        return (
            _REQ.pack(
                PROTOCOL_VERSION,
                self.op,
                self.txn,
                self.ledger_id,
                self.entry_id,
                self.flags,
                self.term,
                self.lafr,
                self.timeout_ms,
                len(self.master_key),
            )
            + self.master_key
            + self.body
        )

    @classmethod
    def decode(cls, frame: bytes | memoryview) -> Request:
        if len(frame) < _REQ.size:
            raise FrameError(f"request frame too short: {len(frame)} bytes < {_REQ.size}")
        version, op, txn, ledger, entry, flags, term, lafr, timeout_ms, klen = _REQ.unpack_from(
            frame
        )
        if version != PROTOCOL_VERSION:
            raise FrameError(f"unsupported protocol version {version}")
        opcode = _OPS.get(op)
        if opcode is None:
            raise FrameError(f"unknown op code {op}")
        end = _REQ.size + klen
        if len(frame) < end:
            raise FrameError("request frame truncated inside the master key")
        return cls(
            opcode,
            txn,
            ledger,
            entry,
            flags,
            term,
            timeout_ms,
            bytes(frame[_REQ.size : end]),
            bytes(frame[end:]),
            lafr,
        )


@frozen
class Response:
    op: OpCode
    txn: int
    status: int
    ledger_id: int
    entry_id: int = -1
    lac: int = -1
    last_entry_id: int = -1
    term: int = NO_TERM
    body: bytes = b""
    lafr: int = -1

    def encode(self) -> bytes:
        return (
            _RESP.pack(
                PROTOCOL_VERSION,
                self.op,
                self.txn,
                self.status,
                self.ledger_id,
                self.entry_id,
                self.lac,
                self.last_entry_id,
                self.term,
                self.lafr,
            )
            + self.body
        )

    @classmethod
    def decode(cls, frame: bytes | memoryview) -> Response:
        if len(frame) < _RESP.size:
            raise FrameError(f"response frame too short: {len(frame)} bytes < {_RESP.size}")
        version, op, txn, status, ledger, entry, lac, last, term, lafr = _RESP.unpack_from(frame)
        if version != PROTOCOL_VERSION:
            raise FrameError(f"unsupported protocol version {version}")
        opcode = _OPS.get(op)
        if opcode is None:
            raise FrameError(f"unknown op code {op}")
        return cls(
            opcode, txn, status, ledger, entry, lac, last, term, bytes(frame[_RESP.size :]), lafr
        )

    @classmethod
    def to(cls, req: Request, status: int, **fields: object) -> Response:
        """A response answering ``req`` (same op, txn and ledger)."""
        return cls(req.op, req.txn, status, req.ledger_id, **fields)  # type: ignore[arg-type]
