"""The entry format: what a writer sends and a bookie stores, byte for byte.

    ledger_id i64 | entry_id i64 | lac i64 | flags u8 | digest | payload

The digest covers the header and the payload, so a bookie can neither move an
entry to another id nor change its bytes without readers noticing. Bookies
read the header (to learn the LAC) but never need the password.
"""

from __future__ import annotations

import enum
import hashlib
import struct

import crc32c as _crc32c
from attrs import frozen
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives import hmac as _hmac

from embedlog.errors import DigestMismatchError
from embedlog.wire.messages import ENTRY_FRAME

HEADER = struct.Struct(">qqqB")
# An ADD_BATCH body's entry frame (id, length) and the entry's header, packed at once.
FRAMED_HEADER = struct.Struct(ENTRY_FRAME.format + HEADER.format[1:])
_FRAME_SIZE = ENTRY_FRAME.size
_CRC = struct.Struct(">I")

FLAG_NOOP = 1  # an unbounded ledger's truncate no-op: readers skip it
# An unbounded ledger's entry: its payload starts with the term of the writer that made
# it (TERM, 8 bytes), which readers strip. Recovery uses it to tell an older term's
# leftover above a newer term's entry (never acknowledged) from the log's own entries.
FLAG_TERM = 2
TERM = struct.Struct(">q")
# A stream record: after the term, an envelope (timestamp, key, headers, message id)
# precedes the application's payload (wire/record.py).
FLAG_RECORD = 4


class DigestType(enum.Enum):
    CRC32C = "CRC32C"
    MAC = "MAC"
    DUMMY = "DUMMY"


_DIGEST_LEN = {DigestType.CRC32C: 4, DigestType.MAC: 32, DigestType.DUMMY: 0}


def master_key(password: bytes) -> bytes:
    """What bookies keep per ledger to refuse writers with the wrong password."""
    return hashlib.sha256(b"embedlog-master-key:" + password).digest()[:20]


@frozen
class EntryHeader:
    ledger_id: int
    entry_id: int
    lac: int
    flags: int

    @property
    def is_noop(self) -> bool:
        return bool(self.flags & FLAG_NOOP)


def split_term(flags: int, payload: bytes) -> tuple[int | None, bytes]:
    """(term of the writer that made the entry, the application's payload); None for
    entries without FLAG_TERM (bounded ledgers, or written before entries had terms)."""
    if flags & FLAG_TERM and len(payload) >= TERM.size:
        return TERM.unpack_from(payload)[0], payload[TERM.size :]
    return None, payload


def header_fields(entry: bytes | memoryview) -> tuple[int, int, int, int]:
    """(ledger id, entry id, LAC, flags) of an entry: ``parse_header`` without the object."""
    if len(entry) < HEADER.size:
        raise ValueError(f"entry too short for its header: {len(entry)} bytes")
    return HEADER.unpack_from(entry)  # type: ignore[return-value]


def parse_header(entry: bytes | memoryview) -> EntryHeader:
    return EntryHeader(*header_fields(entry))


@frozen
class Digester:
    """Packs and verifies entries of one ledger."""

    digest_type: DigestType
    password: bytes = b""

    @property
    def digest_len(self) -> int:
        return _DIGEST_LEN[self.digest_type]

    def _digest(self, header: bytes | memoryview, payload: bytes | memoryview) -> bytes:
        if self.digest_type is DigestType.CRC32C:
            return _CRC.pack(_crc32c.crc32c(payload, _crc32c.crc32c(header)))
        if self.digest_type is DigestType.MAC:
            mac = _hmac.HMAC(self.password, hashes.SHA256())
            mac.update(header)
            mac.update(payload)
            return mac.finalize()
        return b""

    def pack(
        self, ledger_id: int, entry_id: int, lac: int, payload: bytes, flags: int = 0
    ) -> bytes:
        header = HEADER.pack(ledger_id, entry_id, lac, flags)
        return header + self._digest(header, payload) + payload

    def pack_framed(
        self, ledger_id: int, entry_id: int, lac: int, payload: bytes, flags: int = 0
    ) -> bytes:
        """``pack``, framed as an ADD_BATCH body holds it (``messages.frame_entry``): the
        writer's form of an entry, made with one copy of the payload."""
        kind = self.digest_type
        head = FRAMED_HEADER.pack(
            entry_id,
            HEADER.size + _DIGEST_LEN[kind] + len(payload),
            ledger_id,
            entry_id,
            lac,
            flags,
        )
        if kind is DigestType.CRC32C:  # _digest inlined for the default: once per add
            crc = _crc32c.crc32c(payload, _crc32c.crc32c(head[_FRAME_SIZE:]))
            return b"".join((head, _CRC.pack(crc), payload))
        return b"".join((head, self._digest(head[_FRAME_SIZE:], payload), payload))

    def unpack_header_only(self, entry: bytes, ledger_id: int, entry_id: int) -> EntryHeader:
        """Check what can be checked without the password: the size and the ids."""
        if len(entry) < HEADER.size + self.digest_len:
            raise DigestMismatchError(
                f"entry {ledger_id}:{entry_id} is truncated ({len(entry)} bytes)"
            )
        header = EntryHeader(*HEADER.unpack_from(entry))
        if header.ledger_id != ledger_id or header.entry_id != entry_id:
            raise DigestMismatchError(
                f"asked for entry {ledger_id}:{entry_id}, got {header.ledger_id}:{header.entry_id}"
            )
        return header

    def unpack(
        self, entry: bytes | memoryview, ledger_id: int, entry_id: int
    ) -> tuple[EntryHeader, bytes]:
        """Verify ``entry`` is entry ``entry_id`` of ``ledger_id``; return header and payload.
        A view (of a READ_BATCH answer) is checked in place: only the payload is copied."""
        n = self.digest_len
        if len(entry) < HEADER.size + n:
            raise DigestMismatchError(
                f"entry {ledger_id}:{entry_id} is truncated ({len(entry)} bytes)"
            )
        hdr_bytes = entry[: HEADER.size]
        header = EntryHeader(*HEADER.unpack(hdr_bytes))
        if header.ledger_id != ledger_id or header.entry_id != entry_id:
            raise DigestMismatchError(
                f"asked for entry {ledger_id}:{entry_id}, got {header.ledger_id}:{header.entry_id}"
            )
        payload = entry[HEADER.size + n :]
        if n and entry[HEADER.size : HEADER.size + n] != self._digest(hdr_bytes, payload):
            raise DigestMismatchError(f"entry {ledger_id}:{entry_id} failed its digest check")
        return header, bytes(payload)  # bytes(b) of a bytes object is b itself: no copy
