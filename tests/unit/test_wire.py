import pytest
from hypothesis import given
from hypothesis import strategies as st

from embedlog.errors import DigestMismatchError
from embedlog.wire.entry import Digester, DigestType, parse_header
from embedlog.wire.messages import (
    ENTRY_FRAME,
    AddFlags,
    FrameError,
    OpCode,
    ReadFlags,
    Request,
    Response,
    frame_entry,
    pack_entries,
    pack_read_ask,
    pack_results,
    unpack_entries,
    unpack_read_ask,
    unpack_results,
)

i64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@given(
    op=st.sampled_from(list(OpCode)),
    txn=st.integers(0, 2**64 - 1),
    ledger=i64,
    entry=i64,
    flags=st.integers(0, 255),
    term=i64,
    timeout=st.integers(0, 2**32 - 1),
    key=st.binary(max_size=40),
    body=st.binary(max_size=200),
)
def test_request_round_trip(op, txn, ledger, entry, flags, term, timeout, key, body):
    req = Request(op, txn, ledger, entry, flags, term, timeout, key, body)
    assert Request.decode(req.encode()) == req


@given(status=st.integers(-(2**15), 2**15 - 1), lac=i64, body=st.binary(max_size=100))
def test_response_round_trip(status, lac, body):
    resp = Response(OpCode.READ, 7, status, 1, 2, lac, 5, 9, body)
    assert Response.decode(resp.encode()) == resp


def test_corrupt_frames_are_named_errors():
    frame = Request(OpCode.ADD, 1, 2, 3, master_key=b"k" * 20, body=b"x").encode()
    with pytest.raises(FrameError, match="too short"):
        Request.decode(frame[:10])
    with pytest.raises(FrameError, match="version"):
        Request.decode(b"\x09" + frame[1:])
    with pytest.raises(FrameError, match="op code"):
        Request.decode(frame[:1] + b"\xee" + frame[2:])
    with pytest.raises(FrameError, match="master key"):
        Request.decode(frame[:49])


def test_request_kinds_for_fault_injection():
    assert Request(OpCode.ADD, 1, 1).kind == "add"
    assert Request(OpCode.ADD, 1, 1, flags=AddFlags.RECOVERY).kind == "recovery_add"
    assert Request(OpCode.READ, 1, 1, 0).kind == "read"
    assert Request(OpCode.READ, 1, 1, -1, flags=ReadFlags.FENCE).kind == "fence"
    assert Request(OpCode.READ, 1, 1, -1, term=3).kind == "fence"
    assert Request(OpCode.READ, 1, 1, 4, flags=ReadFlags.FENCE | ReadFlags.RECOVERY).kind == (
        "recovery_read"
    )
    assert Request(OpCode.READ_LAC, 1, 1).kind == "read_lac"


@pytest.mark.parametrize("digest", list(DigestType))
def test_entry_pack_unpack(digest):
    d = Digester(digest, b"secret")
    packed = d.pack(5, 6, 4, b"payload", flags=1)
    header, payload = d.unpack(packed, 5, 6)
    assert payload == b"payload" and header.lac == 4 and header.is_noop
    assert parse_header(packed).entry_id == 6


@pytest.mark.parametrize("digest", [DigestType.CRC32C, DigestType.MAC])
def test_tampered_entries_are_detected(digest):
    d = Digester(digest, b"secret")
    packed = bytearray(d.pack(5, 6, 4, b"payload"))
    packed[-1] ^= 0xFF
    with pytest.raises(DigestMismatchError):
        d.unpack(bytes(packed), 5, 6)
    # The same bytes presented as another entry are refused too.
    with pytest.raises(DigestMismatchError):
        d.unpack(d.pack(5, 6, 4, b"p"), 5, 7)


def test_mac_depends_on_password():
    packed = Digester(DigestType.MAC, b"right").pack(1, 0, -1, b"data")
    with pytest.raises(DigestMismatchError):
        Digester(DigestType.MAC, b"wrong").unpack(packed, 1, 0)


@given(entries=st.lists(st.tuples(i64, st.binary(max_size=50)), max_size=20))
def test_batch_entries_round_trip(entries):
    assert unpack_entries(pack_entries(entries)) == entries


@given(results=st.lists(st.tuples(st.integers(-(2**15), 2**15 - 1), i64), max_size=20))
def test_batch_results_round_trip(results):
    assert unpack_results(pack_results(results)) == results


def test_corrupt_batch_bodies_are_named_errors():
    body = pack_entries([(4, b"abc"), (5, b"defg")])
    with pytest.raises(FrameError, match="inside an entry's id"):
        unpack_entries(body[:5])
    with pytest.raises(FrameError, match=r"inside an entry$"):
        unpack_entries(body[:-1])
    with pytest.raises(FrameError, match="whole results"):
        unpack_results(pack_results([(0, 1)])[:-1])
    assert Request(OpCode.ADD_BATCH, 1, 1, 4, flags=AddFlags.RECOVERY).kind == "recovery_add"
    assert Request(OpCode.ADD_BATCH, 1, 1, 4).kind == "add"


@given(
    digest=st.sampled_from(list(DigestType)),
    ledger=i64,
    entry=st.integers(0, 2**63 - 1),
    lac=i64,
    flags=st.integers(0, 255),
    payload=st.binary(max_size=300),
)
def test_the_writer_s_framed_entry_is_the_packed_entry_framed(
    digest, ledger, entry, lac, flags, payload
):
    # The writer frames entries itself in one step (pack_framed); a bookie must see the
    # very bytes that pack and frame_entry would have made, digest included.
    d = Digester(digest, b"pw")
    framed = d.pack_framed(ledger, entry, lac, payload, flags)
    assert framed == frame_entry(entry, d.pack(ledger, entry, lac, payload, flags))
    [(eid, packed)] = unpack_entries(framed)
    assert eid == entry
    assert d.unpack(packed, ledger, entry)[1] == payload


@given(
    count=st.integers(1, 2**32 - 1),
    stride=st.integers(1, 2**32 - 1),
    max_bytes=st.integers(1, 2**32 - 1),
)
def test_read_batch_asks_round_trip(count, stride, max_bytes):
    assert unpack_read_ask(pack_read_ask(count, stride, max_bytes)) == (count, stride, max_bytes)


def test_corrupt_read_batch_asks_are_named_errors():
    ask = pack_read_ask(4, 3, 1000)
    for cut in (b"", ask[:-1], ask + b"\x00"):
        with pytest.raises(FrameError, match="read batch body of"):
            unpack_read_ask(cut)
    for count, stride, max_bytes in ((0, 1, 1), (1, 0, 1), (1, 1, 0)):
        with pytest.raises(FrameError, match="read batch asks for"):
            unpack_read_ask(pack_read_ask(count, stride, max_bytes))
    # A batch read is a read to fault injection: drop_next("read") loses it.
    assert Request(OpCode.READ_BATCH, 1, 1, 0, body=ask).kind == "read"


@pytest.mark.parametrize("digest", list(DigestType))
def test_an_entry_is_verified_in_place_in_a_view(digest):
    d = Digester(digest, b"secret")
    answer = pack_entries([(6, d.pack(5, 6, 4, b"payload"))])
    view = memoryview(answer)[ENTRY_FRAME.size :]
    header, payload = d.unpack(view, 5, 6)
    assert (header.entry_id, payload, type(payload)) == (6, b"payload", bytes)
    spoilt = bytearray(answer)
    spoilt[-1] ^= 1
    if digest is not DigestType.DUMMY:
        with pytest.raises(DigestMismatchError):
            d.unpack(memoryview(bytes(spoilt))[ENTRY_FRAME.size :], 5, 6)
