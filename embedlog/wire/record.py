"""A stream record's envelope: timestamp, key, headers and message id, byte for byte.

A stream entry whose flags carry ``FLAG_RECORD`` holds, after its term (``entry.py``
``FLAG_TERM``, 8 bytes), this envelope and then the application's payload
(big-endian throughout)::

    version u8 (=1) | fields u8 | length u16 | field... | payload

``length`` counts the bytes of the fields that follow it, so a reader skips fields it
does not know: a later version adds a field by taking a new bit of ``fields`` and
appending its bytes after the ones below; only a change that breaks that rule takes a
new ``version``, which older readers refuse by name. The fields, in this order, each
present when its bit is set:

    0x01 timestamp  i64   microseconds since the epoch (the writer's wall clock)
    0x02 key        u16 length, bytes
    0x04 headers    u16 count, then per header: u8 name length, name (UTF-8),
                    u16 value length, value
    0x08 msg_id     u8 length, bytes (the producer's id for deduplication)
    0x10 appended   i64   microseconds since the epoch: the writer's clock at the
                          append, when the caller set the timestamp (the deduplication
                          window is measured on it)

An append without key, headers or message id costs the 12 bytes of version, fields,
length and timestamp. Entries without ``FLAG_RECORD`` (bounded ledgers, stream entries
written before records existed) have no envelope: their timestamp and key are None and
they have no headers.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from types import MappingProxyType

from attrs import frozen

from embedlog.wire.entry import FLAG_RECORD, split_term

VERSION = 1
TIMESTAMP = 0x01
KEY = 0x02
HEADERS = 0x04
MSG_ID = 0x08
APPENDED = 0x10
KNOWN = TIMESTAMP | KEY | HEADERS | MSG_ID | APPENDED

# What a key, a header and a message id may hold: the envelope's own length fields
# bound them (u16 for the fields in all, u8 for a header name and a message id).
MAX_KEY = 1024
MAX_HEADERS = 64
MAX_HEADER_NAME = 255
MAX_HEADER_VALUE = 4096
MAX_MSG_ID = 255
MAX_FIELDS = 65535
CALLER_FIELDS = MAX_FIELDS - 8  # the rest is the writer's ``appended`` clock

_HEAD = struct.Struct(">BBH")
# The common case, packed at once: no key, no headers, no message id.
_HEAD_TIME = struct.Struct(">BBHq")
TIME_ONLY_SIZE = _HEAD_TIME.size  # a record with a timestamp and nothing else
_I64 = struct.Struct(">q")
_U16 = struct.Struct(">H")
_U8 = struct.Struct(">B")

NO_HEADERS: Mapping[str, bytes] = MappingProxyType({})


class RecordFormatError(ValueError):
    """A record's envelope is malformed or of a version this embedlog cannot read."""


@frozen
class Record:
    """What a record carries besides its payload (``timestamp`` in seconds)."""

    timestamp: float | None = None
    key: bytes | None = None
    headers: Mapping[str, bytes] = NO_HEADERS
    msg_id: bytes | None = None
    appended: float | None = None  # the writer's clock, when not ``timestamp``

    @property
    def appended_at(self) -> float | None:
        """When the writer appended it (what the deduplication window is measured on)."""
        return self.timestamp if self.appended is None else self.appended


BARE = Record()  # an entry without an envelope


def check_fields(
    key: object, headers: object, msg_id: object
) -> tuple[bytes | None, dict[str, bytes], bytes | None]:
    """The caller's key, headers and message id as the envelope stores them, or a
    ValueError/TypeError naming what is wrong and what is allowed."""
    if key is not None:
        if not isinstance(key, (bytes, bytearray, memoryview)):
            raise TypeError(f"key must be bytes or None, got {type(key).__name__}")
        key = bytes(key)
        if len(key) > MAX_KEY:
            raise ValueError(f"a key holds at most {MAX_KEY} bytes, got {len(key)}")
    out: dict[str, bytes] = {}
    if headers:
        if not isinstance(headers, Mapping):
            raise TypeError(
                f"headers must be a mapping of str to bytes, got {type(headers).__name__}"
            )
        if len(headers) > MAX_HEADERS:
            raise ValueError(f"a record holds at most {MAX_HEADERS} headers, got {len(headers)}")
        for name, value in headers.items():
            if not isinstance(name, str):
                raise TypeError(f"a header name must be str, got {type(name).__name__}")
            if not isinstance(value, (bytes, bytearray, memoryview)):
                raise TypeError(
                    f"header {name!r}: a value must be bytes, got {type(value).__name__} "
                    "(encode text with .encode())"
                )
            if len(name.encode()) > MAX_HEADER_NAME:
                raise ValueError(f"header name {name[:40]!r}...: at most {MAX_HEADER_NAME} bytes")
            if len(value) > MAX_HEADER_VALUE:
                raise ValueError(
                    f"header {name!r}: a value holds at most {MAX_HEADER_VALUE} bytes, "
                    f"got {len(value)}"
                )
            out[name] = bytes(value)
    if msg_id is not None:
        if isinstance(msg_id, str):
            msg_id = msg_id.encode()
        if not isinstance(msg_id, (bytes, bytearray, memoryview)):
            raise TypeError(f"msg_id must be str, bytes or None, got {type(msg_id).__name__}")
        msg_id = bytes(msg_id)
        if not 0 < len(msg_id) <= MAX_MSG_ID:
            raise ValueError(f"msg_id holds 1 to {MAX_MSG_ID} bytes, got {len(msg_id)}")
    return key, out, msg_id


def encode(
    timestamp: float,
    key: bytes | None = None,
    headers: Mapping[str, bytes] = NO_HEADERS,
    msg_id: bytes | None = None,
    appended: float | None = None,
) -> bytes:
    """The envelope of a record (to put before its payload); fields already checked
    with ``check_fields``. ``appended``: the writer's clock, given only when the caller
    set ``timestamp``."""
    micros = round(timestamp * 1_000_000)
    if key is None and not headers and msg_id is None and appended is None:
        return _HEAD_TIME.pack(VERSION, TIMESTAMP, 8, micros)
    fields = TIMESTAMP
    parts = [_I64.pack(micros)]
    if key is not None:
        fields |= KEY
        parts += (_U16.pack(len(key)), key)
    if headers:
        fields |= HEADERS
        parts.append(_U16.pack(len(headers)))
        for name, value in headers.items():
            raw = name.encode()
            parts += (_U8.pack(len(raw)), raw, _U16.pack(len(value)), value)
    if msg_id is not None:
        fields |= MSG_ID
        parts += (_U8.pack(len(msg_id)), msg_id)
    if appended is not None:
        fields |= APPENDED
        parts.append(_I64.pack(round(appended * 1_000_000)))
    body = b"".join(parts)
    # What the caller gives is held to 8 bytes less than the length field allows, so the
    # writer's own clock (``appended``) always fits: a record packed without it (a Spark
    # task checking its rows) is refused or accepted exactly as the writer's append is.
    given = len(body) - (0 if appended is None else 8)
    if given > CALLER_FIELDS:
        raise ValueError(
            f"a record's timestamp, key, headers and msg_id take {given} bytes; at most "
            f"{CALLER_FIELDS}: make the key or headers smaller"
        )
    return _HEAD.pack(VERSION, fields, len(body)) + body


def decode(data: bytes) -> tuple[Record, bytes]:
    """(the record's fields, its payload) of what follows the term of a FLAG_RECORD entry."""
    if len(data) < _HEAD.size:
        raise RecordFormatError(f"a record's envelope needs {_HEAD.size} bytes, got {len(data)}")
    version, fields, length = _HEAD.unpack_from(data)
    if version != VERSION:
        raise RecordFormatError(
            f"record envelope version {version}: this embedlog reads version {VERSION}; "
            "upgrade embedlog to read it"
        )
    end = _HEAD.size + length
    if end > len(data):
        raise RecordFormatError(f"a record's fields say {length} bytes, {len(data) - 4} follow")
    pos = _HEAD.size
    timestamp: float | None = None
    key: bytes | None = None
    headers: Mapping[str, bytes] = NO_HEADERS
    msg_id: bytes | None = None
    appended: float | None = None
    try:
        if fields & TIMESTAMP:
            timestamp = _I64.unpack_from(data, pos)[0] / 1_000_000
            pos += 8
        if fields & KEY:
            n = _U16.unpack_from(data, pos)[0]
            key, pos = _take(data, pos + 2, n, end)
        if fields & HEADERS:
            count = _U16.unpack_from(data, pos)[0]
            pos += 2
            found: dict[str, bytes] = {}
            for _ in range(count):
                raw, pos = _take(data, pos + 1, data[pos], end)
                n = _U16.unpack_from(data, pos)[0]
                found[raw.decode()], pos = _take(data, pos + 2, n, end)
            headers = MappingProxyType(found)
        if fields & MSG_ID:
            msg_id, pos = _take(data, pos + 1, data[pos], end)
        if fields & APPENDED:
            appended = _I64.unpack_from(data, pos)[0] / 1_000_000
            pos += 8
    except (struct.error, IndexError, UnicodeDecodeError) as e:
        raise RecordFormatError(f"a record's fields are malformed: {e}") from None
    if pos > end:
        raise RecordFormatError(f"a record's fields run {pos - end} bytes past their length")
    # Fields of a later version (bits this one does not know) lie before ``end``: skipped.
    return Record(timestamp, key, headers, msg_id, appended), data[end:]


def split_record(flags: int, payload: bytes) -> tuple[int | None, Record, bytes]:
    """(term, record fields, the application's payload) of a stored entry's payload:
    ``entry.split_term`` and then, with ``FLAG_RECORD``, ``decode``."""
    term, rest = split_term(flags, payload)
    if flags & FLAG_RECORD:
        record, rest = decode(rest)
        return term, record, rest
    return term, BARE, rest


def _take(data: bytes, pos: int, n: int, end: int) -> tuple[bytes, int]:
    if pos + n > end:
        raise RecordFormatError("a record's field runs past the envelope's length")
    return data[pos : pos + n], pos + n
