"""The stream record envelope (embedlog/wire/record.py): byte layout, round trips,
forward compatibility, and malformed input named, never misread."""

from __future__ import annotations

import struct

import pytest

from embedlog.wire import record
from embedlog.wire.entry import FLAG_RECORD, FLAG_TERM, TERM
from embedlog.wire.record import BARE, Record, RecordFormatError


def test_a_timestamp_only_envelope_is_12_bytes_as_documented():
    env = record.encode(1.5)
    assert env == bytes([1, record.TIMESTAMP]) + struct.pack(">H", 8) + struct.pack(">q", 1_500_000)
    assert record.decode(env + b"payload") == (Record(timestamp=1.5), b"payload")


@pytest.mark.parametrize(
    ("key", "headers", "msg_id"),
    [
        (None, {}, None),
        (b"", {}, None),  # an empty key is a key, not None
        (b"k" * record.MAX_KEY, {}, None),
        (None, {"a": b"", "é": b"\x00\xff"}, None),
        (b"user-7", {"trace": b"abc", "n": b"1"}, b"m-1"),
        (None, {}, b"x" * record.MAX_MSG_ID),
        (None, {f"h{i}": b"v" for i in range(record.MAX_HEADERS)}, None),
    ],
)
def test_fields_round_trip(key, headers, msg_id):
    k, h, m = record.check_fields(key, headers, msg_id)
    env = record.encode(1_700_000_000.123456, k, h, m)
    got, payload = record.decode(env + b"\x00data")
    assert payload == b"\x00data"
    assert got.timestamp == pytest.approx(1_700_000_000.123456, abs=1e-6)
    assert got.key == key
    assert dict(got.headers) == headers
    assert got.msg_id == msg_id


def test_timestamps_keep_microseconds_and_may_precede_the_epoch():
    for ts in (0.0, 0.000001, -12.5, 4_102_444_800.999999):
        got, _ = record.decode(record.encode(ts))
        assert got.timestamp == pytest.approx(ts, abs=5e-7)


def test_the_append_time_is_kept_apart_only_when_the_caller_set_the_timestamp():
    own = record.decode(record.encode(100.0, None, {}, b"m"))[0]
    assert (own.appended, own.appended_at) == (None, 100.0)
    set_by_caller = record.decode(record.encode(5.0, None, {}, b"m", appended=100.0))[0]
    assert (set_by_caller.timestamp, set_by_caller.appended_at) == (5.0, 100.0)


def test_a_str_msg_id_is_stored_as_its_utf8_bytes():
    assert record.check_fields(None, None, "id-é")[2] == "id-é".encode()


@pytest.mark.parametrize(
    ("key", "headers", "msg_id", "error", "says"),
    [
        ("text", None, None, TypeError, "key must be bytes"),
        (b"k" * (record.MAX_KEY + 1), None, None, ValueError, "at most 1024 bytes"),
        (None, [("a", b"b")], None, TypeError, "mapping of str to bytes"),
        (None, {1: b"b"}, None, TypeError, "header name must be str"),
        (None, {"a": "text"}, None, TypeError, "encode text with .encode()"),
        (None, {"a": b"v" * (record.MAX_HEADER_VALUE + 1)}, None, ValueError, "at most 4096"),
        (None, {"n" * 256: b""}, None, ValueError, "at most 255 bytes"),
        (None, {f"h{i}": b"" for i in range(65)}, None, ValueError, "at most 64 headers"),
        (None, None, b"", ValueError, "msg_id holds 1 to 255 bytes"),
        (None, None, 7, TypeError, "msg_id must be str, bytes or None"),
    ],
)
def test_bad_fields_are_named(key, headers, msg_id, error, says):
    with pytest.raises(error, match=says):
        record.check_fields(key, headers, msg_id)


def test_a_later_versions_extra_fields_are_skipped_by_their_length():
    # A field with bit 0x20, unknown here, after the known ones: readers skip it.
    fields = struct.pack(">q", 2_000_000) + b"\x02ab"
    env = struct.pack(">BBH", 1, record.TIMESTAMP | 0x20, len(fields)) + fields
    got, payload = record.decode(env + b"P")
    assert (got.timestamp, payload) == (2.0, b"P")


def test_an_unknown_version_is_refused_by_name():
    with pytest.raises(RecordFormatError, match=r"version 2: .*upgrade embedlog"):
        record.decode(struct.pack(">BBH", 2, 0, 0) + b"P")


@pytest.mark.parametrize(
    "env",
    [
        b"\x01\x01",  # shorter than the fixed head
        struct.pack(">BBH", 1, record.TIMESTAMP, 8) + b"\x00" * 4,  # length past the end
        struct.pack(">BBH", 1, record.TIMESTAMP, 4) + b"\x00" * 8,  # field past length
        struct.pack(">BBHH", 1, record.KEY, 3, 9) + b"k",  # key past length
        struct.pack(">BBHHB", 1, record.HEADERS, 4, 1, 1) + b"\xff",  # name not UTF-8
    ],
)
def test_malformed_envelopes_raise_record_format_error(env):
    with pytest.raises(RecordFormatError):
        record.decode(env)


def test_split_record_reads_term_envelope_and_payload():
    stored = TERM.pack(3) + record.encode(5.0, b"k") + b"data"
    assert record.split_record(FLAG_TERM | FLAG_RECORD, stored) == (
        3,
        Record(timestamp=5.0, key=b"k"),
        b"data",
    )
    # Entries written before records existed: the term only, no envelope.
    assert record.split_record(FLAG_TERM, TERM.pack(3) + b"data") == (3, BARE, b"data")
    assert record.split_record(0, b"data") == (None, BARE, b"data")


def _headers_for(given: int) -> dict[str, bytes]:
    """Headers that make a timestamp-only record's fields exactly ``given`` bytes."""
    rest = given - 8 - 2  # the timestamp, the header count
    headers = {}
    for i in range(64):
        value = min(4096, rest - 6)  # 1 + 3-byte name + 2 + value
        headers[f"h{i:02d}"] = b"v" * value
        rest -= 6 + value
        if rest == 0:
            return headers
    raise AssertionError("too large for the header limits")


def test_the_writers_clock_always_fits_beside_the_callers_fields():
    """A caller's fields are held to 8 bytes below the length field's limit, packed with
    or without the writer's ``appended`` clock alike (a Spark task checks rows without
    it, the driver's append adds it)."""
    at_limit = _headers_for(record.CALLER_FIELDS)
    for appended in (None, 5.0):
        env = record.encode(1.0, None, at_limit, None, appended)
        rec, _ = record.decode(env)
        assert rec.headers == at_limit and rec.appended == appended
        with pytest.raises(ValueError, match="make the key or headers smaller"):
            record.encode(1.0, None, _headers_for(record.CALLER_FIELDS + 1), None, appended)
