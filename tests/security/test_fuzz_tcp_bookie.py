"""A hypothesis fuzz of a live TCP bookie by a client that does not know any ledger key.

The fuzzer speaks the wire format (embedlog.wire.messages) over a raw socket: every
operation with arbitrary ids, flags, terms, timeouts, keys that are empty, wrong or
random, bodies that are well-formed entries, well-formed batches or noise, and frames
that are not frames at all (noise, a bad length prefix, a cut-off frame). After each
example a valid read on a fresh connection must be answered with the right entry
(the bookie is alive and serving), and at the end the legitimate ledgers are intact:
every acknowledged entry reads back on every bookie that holds it, the bounded
ledger's writer and the unbounded ledger's writer still write (nothing fenced them
or moved their term), and the closed ledger was neither trimmed nor deleted.

Derandomized for CI (the same examples on every run); EMBEDLOG_FUZZ_EXAMPLES and
EMBEDLOG_FUZZ_RANDOM=1 run more, or new, examples locally.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from embedlog import LocalCluster
from embedlog.transport.tcp import MAX_FRAME, parse_address
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import HEADER, Digester, DigestType
from embedlog.wire.messages import (
    AddFlags,
    OpCode,
    ReadFlags,
    Request,
    Response,
    TrimFlags,
    pack_entries,
    pack_read_ask,
)

LENGTH = struct.Struct(">I")
EXAMPLES = int(os.environ.get("EMBEDLOG_FUZZ_EXAMPLES", "400"))
RANDOM = os.environ.get("EMBEDLOG_FUZZ_RANDOM") == "1"
ENTRIES = 5
# A generous read deadline, not a timing assertion: a bookie that answers nothing in
# this long has stopped serving.
READ_DEADLINE = 30.0


class Victims:
    """The legitimate ledgers the fuzzer attacks, and what must stay true of them."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.writer = cluster.client("owner")
        closed = self.writer.create_ledger(3, 3, 2, digest=DigestType.MAC, password=b"secret")
        for i in range(ENTRIES):
            closed.add(b"closed %d" % i)
        closed.close()
        self.closed_id = closed.ledger_id
        self.open = self.writer.create_ledger(3, 3, 2, password=b"pw")
        for i in range(ENTRIES):
            self.open.add(b"open %d" % i)
        self.stream = self.writer.create_unbounded(3, 3, 2, password=b"upw")
        for i in range(ENTRIES):
            self.stream.append(b"stream %d" % i)
        self.ids = [self.closed_id, self.open.ledger_id, self.stream.ledger_id]
        # What a plain read of (ledger, entry) returns from a bookie: the stored entry.
        self.sentinel = (self.closed_id, 2)
        bid = cluster.bookie_ids[0]
        self.expected_sentinel = cluster.read_from_bookie(bid, *self.sentinel)

    def check_intact(self) -> None:
        expected = {
            self.closed_id: [b"closed %d" % i for i in range(ENTRIES)],
            self.open.ledger_id: [b"open %d" % i for i in range(ENTRIES)],
        }
        for bid in self.cluster.bookie_ids:
            for lid, payloads in expected.items():
                for eid, data in enumerate(payloads):
                    assert self.cluster.read_from_bookie(bid, lid, eid) == data, (bid, lid, eid)
        stream = [e.data for e in self.stream.read(0, ENTRIES - 1)]
        assert stream == [b"stream %d" % i for i in range(ENTRIES)]


@pytest.fixture(scope="module")
def victims(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Victims]:
    data_dir = tmp_path_factory.mktemp("fuzz")
    with LocalCluster(num_bookies=3, data_dir=data_dir, transport="tcp") as cluster:
        yield Victims(cluster)


# -- what the fuzzer sends ------------------------------------------------------------------

_I64 = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([-1, 0, 1, 2, 4, 5, 1000, 2**31, 2**63 - 1, -(2**63)]),
)
_KEYS = st.one_of(
    st.just(b""),
    st.binary(min_size=1, max_size=40),
    st.just(b"\x00" * 20),
)


def _entry(lid: int, eid: int, lac: int, flags: int, payload: bytes) -> bytes:
    return Digester(DigestType.CRC32C).pack(lid, eid, lac, payload, flags)


@st.composite
def _request(draw: st.DrawFn, ids: list[int]) -> bytes:
    op = draw(st.sampled_from(list(OpCode)))
    lid = draw(st.one_of(st.sampled_from(ids), _I64))
    eid = draw(st.one_of(st.integers(-1, ENTRIES + 2), _I64))
    flags = draw(
        st.one_of(
            st.sampled_from(
                [0, AddFlags.RECOVERY, AddFlags.TRUNCATE, ReadFlags.FENCE, TrimFlags.ABOVE, 3]
            ),
            st.integers(0, 255),
        )
    )
    term = draw(st.one_of(st.sampled_from([-1, 0, 1, 2, 2**63 - 1]), _I64))
    lafr = draw(st.one_of(st.just(-1), _I64))
    # Long polls of up to a second: longer ones only make the example slower.
    timeout_ms = draw(st.integers(0, 1000))
    key = draw(_KEYS)
    kind = draw(st.sampled_from(["entry", "batch", "read_ask", "noise", "empty"]))
    if kind == "entry":
        lac = draw(st.one_of(st.integers(-1, 1000), _I64))
        body = _entry(lid, eid, lac, draw(st.integers(0, 255)), draw(st.binary(max_size=64)))
    elif kind == "batch":
        n = draw(st.integers(1, 4))
        lac = draw(st.integers(-1, 1000))
        body = pack_entries(
            [(eid + i, _entry(lid, eid + i, lac, 0, b"x")) for i in range(n) if eid + i < 2**63]
        )
    elif kind == "read_ask":  # READ_BATCH's body, asking for anything up to its limits
        u32 = st.one_of(st.sampled_from([0, 1, 3, 512, 2**32 - 1]), st.integers(0, 2**32 - 1))
        body = pack_read_ask(draw(u32), draw(u32), draw(u32))
    elif kind == "noise":
        body = draw(st.binary(max_size=200))
    else:
        body = b""
    txn = draw(st.integers(0, 2**64 - 1))
    try:
        req = Request(op, txn, lid, eid, flags, term, timeout_ms, key, body, lafr)
        frame = req.encode()
    except struct.error:  # an id out of range for its field: send noise instead
        frame = body
    return LENGTH.pack(len(frame)) + frame


@st.composite
def _malformed(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["noise", "huge_prefix", "zero", "bad_version", "cut"]))
    if kind == "noise":
        data = draw(st.binary(min_size=1, max_size=300))
        return LENGTH.pack(len(data)) + data
    if kind == "huge_prefix":
        return LENGTH.pack(draw(st.integers(MAX_FRAME + 1, 2**32 - 1)))
    if kind == "zero":
        return LENGTH.pack(0)
    if kind == "bad_version":
        frame = Request(OpCode.READ, 1, 1, 0).encode()
        return LENGTH.pack(len(frame)) + bytes([draw(st.integers(2, 255))]) + frame[1:]
    frame = Request(OpCode.ADD, 1, 1, 0, body=b"y" * 50).encode()
    return LENGTH.pack(len(frame)) + frame[: draw(st.integers(0, len(frame) - 1))]


def _frames(ids: list[int]) -> st.SearchStrategy[list[bytes]]:
    return st.lists(
        st.one_of(_request(ids), _request(ids), _request(ids), _malformed()),
        min_size=1,
        max_size=12,
    )


# -- talking to the bookie ------------------------------------------------------------------


def _connect(address: str) -> socket.socket:
    host, port = parse_address(address)
    sock = socket.create_connection((host, port), timeout=READ_DEADLINE)
    sock.settimeout(READ_DEADLINE)
    return sock


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed by the bookie")
        buf += chunk
    return bytes(buf)


def _answer_to(sock: socket.socket, txn: int) -> Response:
    """Read answers until the one for ``txn`` (the others are the fuzzer's)."""
    while True:
        (n,) = LENGTH.unpack(_recv_exactly(sock, LENGTH.size))
        resp = Response.decode(_recv_exactly(sock, n))
        if resp.txn == txn:
            return resp


def _send_all(address: str, frames: list[bytes]) -> None:
    """Send the frames in order on one connection, opening a new one whenever the bookie
    closed the last (it may drop a connection that sent something that is not a frame)."""
    sock = _connect(address)
    try:
        for frame in frames:
            try:
                sock.sendall(frame)
            except OSError:
                sock.close()
                sock = _connect(address)
                sock.sendall(frame)
    finally:
        # Half-close: the bookie sees the end of what we sent (a cut-off frame stays cut
        # off) and may still answer; then let it go.
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        sock.close()


def _check_serving(address: str, victims: Victims) -> None:
    lid, eid = victims.sentinel
    sock = _connect(address)
    try:
        txn = 2**64 - 1
        frame = Request(OpCode.READ, txn, lid, eid).encode()
        sock.sendall(LENGTH.pack(len(frame)) + frame)
        resp = _answer_to(sock, txn)
    finally:
        sock.close()
    assert resp.status == StatusCode.EOK, resp
    assert resp.body[: HEADER.size] == HEADER.pack(lid, eid, *HEADER.unpack_from(resp.body)[2:])


def _fuzz_settings() -> Any:
    return settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=not RANDOM,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


def test_a_keyless_client_cannot_hurt_a_live_tcp_bookie(victims: Victims) -> None:
    cluster = victims.cluster
    addresses = [cluster.transport.address(bid) for bid in cluster.bookie_ids]  # type: ignore[attr-defined]

    @_fuzz_settings()
    @given(target=st.sampled_from(addresses), frames=_frames(victims.ids))
    def attack(target: str, frames: list[bytes]) -> None:
        _send_all(target, frames)
        _check_serving(target, victims)

    attack()

    for bid in cluster.bookie_ids:
        assert cluster.bookie(bid).state.value == "serving", bid
    victims.check_intact()
    # Neither writer was fenced nor displaced: both still write, and read back.
    assert victims.open.add(b"after") == ENTRIES
    assert victims.stream.append(b"after") == ENTRIES
    assert victims.open.read(ENTRIES, ENTRIES)[0].data == b"after"
    victims.open.close()
    reader = cluster.client("reader").open_ledger(victims.open.ledger_id, password=b"pw")
    assert reader.last_add_confirmed == ENTRIES
