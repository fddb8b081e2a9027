"""One bad client cannot hurt the others: attacks on a TCP bookie by raw-socket clients
that speak the frame format, against a real LocalCluster(transport="tcp").

Each test performs one attack (answers never read, too many connections, a frame begun
and never finished, a connection left idle) and checks the bookie's bound held and that
a well-behaved client, and every acknowledged entry, was unaffected.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from embedlog.errors import BookieUnavailableError
from embedlog.transport import tls as tlsmod
from embedlog.transport.base import next_txn
from embedlog.transport.limits import (
    NOTICE_TXN,
    ConnectionLimits,
    close_reason,
    may_read,
    notice_reason,
    refusal,
)
from embedlog.transport.tcp import MAX_FRAME, BookieServer, parse_address
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import OpCode, Request, Response

MiB = 1024 * 1024
BOOKIE = "bookie-1"


def frame(req: Request) -> bytes:
    payload = req.encode()
    return struct.pack(">I", len(payload)) + payload


def recv_frame(sock: socket.socket) -> Response | None:
    """The next answer on a blocking raw socket, None if the bookie closed it."""
    head = _recv_exactly(sock, 4)
    if head is None:
        return None
    body = _recv_exactly(sock, struct.unpack(">I", head)[0])
    return None if body is None else Response.decode(body)


def _recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        try:
            chunk = sock.recv(n - len(data))
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        data += chunk
    return data


def wait_closed_by_peer(sock: socket.socket) -> None:
    """Returns once the bookie has closed ``sock`` (no deadline: pytest's own timeout
    applies), discarding anything it sent first."""
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass


def wait_until(cond: Callable[[], bool]) -> None:
    """Poll ``cond`` (no deadline: pytest's own timeout applies)."""
    while not cond():
        time.sleep(0.01)


@contextlib.contextmanager
def raw_connection(cluster: Any, bookie_id: str = BOOKIE) -> Iterator[socket.socket]:
    host, port = parse_address(cluster.transport.address(bookie_id))
    sock = socket.create_connection((host, port))
    try:
        if cluster.tls:
            ctx = tlsmod.client_context(cluster.transport.tls_ca)
            sock = ctx.wrap_socket(sock, server_hostname=host)
        yield sock
    finally:
        sock.close()


def server(cluster: Any, bookie_id: str = BOOKIE) -> BookieServer:
    s: BookieServer = cluster.transport.servers[bookie_id]
    return s


def on_loop(cluster: Any, fn: Callable[..., Any], *args: Any) -> Any:
    return cluster.runtime.call(fn, *args)


def write_entries(client: Any, payloads: list[bytes]) -> int:
    wh = client.create_ledger(3, 3, 2)
    for p in payloads:
        wh.add(p)
    wh.close()
    return int(wh.ledger_id)


def read_all(client: Any, ledger_id: int) -> list[bytes]:
    rh = client.open_ledger(ledger_id)
    try:
        return [e.data for e in rh.read(0, rh.last_add_confirmed)]
    finally:
        rh.close()


# -- the decisions, as tables ----------------------------------------------------------------

LIMITS = ConnectionLimits(
    max_connections=10,
    max_unsent_answer_bytes=1000,
    max_requests_in_progress=3,
    idle_timeout=60.0,
    partial_frame_timeout=5.0,
)


@pytest.mark.parametrize(
    ("unsent", "in_progress", "expected"),
    [
        (0, 0, True),
        (1000, 2, True),  # at the bound, not past it
        (1001, 0, False),  # answers the client has not taken
        (0, 3, False),  # requests being handled
        (5000, 5, False),
    ],
)
def test_may_read(unsent: int, in_progress: int, expected: bool) -> None:
    assert may_read(LIMITS, unsent, in_progress) is expected


@pytest.mark.parametrize(
    ("now", "last_active", "frame_progress", "in_progress", "expected"),
    [
        (100.0, 99.0, None, 0, None),
        (100.0, 30.0, None, 0, "idle_timeout=60"),
        (100.0, 30.0, None, 1, None),  # a request in progress (a long poll): not idle
        (100.0, 99.0, 96.0, 0, None),  # a frame arriving
        (100.0, 99.0, 94.0, 0, "partial_frame_timeout=5"),  # a frame that stalled
        (100.0, 99.0, 94.0, 2, "partial_frame_timeout=5"),  # stalled, whatever else runs
        (100.0, 10.0, 99.0, 0, None),  # long quiet, but now a frame is arriving
    ],
)
def test_close_reason(
    now: float,
    last_active: float,
    frame_progress: float | None,
    in_progress: int,
    expected: str | None,
) -> None:
    why = close_reason(
        LIMITS, now, last_active=last_active, frame_progress=frame_progress, in_progress=in_progress
    )
    if expected is None:
        assert why is None
    else:
        assert why is not None and expected in why


def test_the_refusal_notice_names_the_limit() -> None:
    notice = Response.decode(refusal(LIMITS).encode())
    assert notice.txn == NOTICE_TXN and notice.status == StatusCode.ETOOMANYREQUESTS
    why = notice_reason(notice)
    assert why is not None and "limit of 10 connections" in why and "max_connections" in why
    assert notice_reason(Response(OpCode.READ, 5, StatusCode.EOK, 1)) is None


def test_limits_are_bookie_settings_and_checked(make_cluster: Any) -> None:
    with pytest.raises(ValueError, match="max_connections must be > 0"):
        make_cluster(1, transport="tcp", max_connections=0)
    cluster = make_cluster(1, transport="tcp", max_unsent_answer_bytes=12345, idle_timeout=7.0)
    limits = server(cluster).limits
    assert limits.max_unsent_answer_bytes == 12345 and limits.idle_timeout == 7.0
    assert limits.max_connections == ConnectionLimits().max_connections


# -- answers never read ------------------------------------------------------------------------


def test_a_client_that_never_reads_its_answers_costs_a_bounded_amount(make_cluster: Any) -> None:
    """Reads of a 1 MiB entry, pipelined and never read: the bookie stops reading that
    connection's requests once its unsent answers pass max_unsent_answer_bytes. Unbounded,
    it held every answer (here 400 MiB; 4.9 GB in the review that found it)."""
    cluster = make_cluster(3, transport="tcp")
    limits = server(cluster).limits
    client = cluster.client("good")
    big = bytes(range(256)) * (MiB // 256)
    lid = write_entries(client, [big])
    reads = b"".join(frame(Request(OpCode.READ, next_txn(), lid, 0)) for _ in range(400))
    with raw_connection(cluster) as attacker:
        attacker.sendall(reads)  # 400 small frames: the kernel takes them all at once
        wait_until(
            lambda: on_loop(cluster, server(cluster).unsent_bytes) > limits.max_unsent_answer_bytes
        )
        # While it is stuck, the rest of the cluster goes on: a writer and a reader.
        other = write_entries(client, [b"fine %d" % i for i in range(20)])
        assert read_all(client, other) == [b"fine %d" % i for i in range(20)]
        assert read_all(client, lid) == [big]
        peak = 0
        for _ in range(50):  # it stays stuck: the bound holds however long we look
            peak = max(peak, on_loop(cluster, server(cluster).unsent_bytes))
            time.sleep(0.01)
        assert server(cluster).connections == 2  # the attacker's is still open: held, not shed
        print(f"unsent answers held for the attacker: peak {peak / MiB:.1f} MiB")
        # The bound, plus the answer computed as it was reached (and the good client's).
        assert peak <= limits.max_unsent_answer_bytes + 3 * MiB
    wait_until(lambda: on_loop(cluster, server(cluster).unsent_bytes) == 0)


def test_requests_in_progress_per_connection_are_bounded(make_cluster: Any) -> None:
    """Long polls that wait: past max_requests_in_progress the bookie reads no more of that
    connection's requests until one is answered."""
    cluster = make_cluster(3, transport="tcp", max_requests_in_progress=5, long_poll_max=0.5)
    client = cluster.client("w")
    wh = client.create_ledger(3, 3, 2)
    wh.add(b"first")
    lid = wh.ledger_id
    polls = [Request(OpCode.READ_LAC, next_txn(), lid, 5, timeout_ms=60_000) for _ in range(20)]
    with raw_connection(cluster) as attacker:
        attacker.sendall(b"".join(frame(r) for r in polls))

        def in_progress() -> int:  # the bookie's requests being handled as tasks: the polls
            return len(server(cluster)._handling)

        wait_until(lambda: on_loop(cluster, in_progress) >= 5)
        for _ in range(20):  # were more read, more would be waiting
            assert on_loop(cluster, in_progress) <= 5
            time.sleep(0.01)
        wh.add(b"second")  # this writer's own connection is not held up
        # Each waits at most long_poll_max: all 20 are answered, five at a time.
        answered = [recv_frame(attacker) for _ in polls]
        assert {a.txn for a in answered if a is not None} == {r.txn for r in polls}
    assert [e.data for e in wh.read(0, 1)] == [b"first", b"second"]


# -- too many connections ----------------------------------------------------------------------


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_connections_past_the_cap_are_refused_with_a_reason(make_cluster: Any, tls: bool) -> None:
    cluster = make_cluster(3, transport="tcp", tls=tls, max_connections=3)
    client = cluster.client("good")
    lid = write_entries(client, [b"kept"])  # the cluster's client holds one connection
    with contextlib.ExitStack() as stack:
        holders = [stack.enter_context(raw_connection(cluster)) for _ in range(2)]
        wait_until(lambda: server(cluster).connections == 3)
        refused = stack.enter_context(raw_connection(cluster))
        notice = recv_frame(refused)
        assert notice is not None and notice.txn == NOTICE_TXN
        assert notice.status == StatusCode.ETOOMANYREQUESTS
        assert b"limit of 3 connections" in notice.body and b"max_connections" in notice.body
        assert recv_frame(refused) is None  # then closed
        # A real client turned away is told why, not left to time out.
        transport = cluster.transport.client
        cluster.runtime.run(transport._conns.pop(BOOKIE).close())  # its slot goes ...
        holders.append(stack.enter_context(raw_connection(cluster)))  # ... to an attacker
        wait_until(lambda: server(cluster).connections == 3)
        req = Request(OpCode.READ, next_txn(), lid, 0)
        with pytest.raises(
            BookieUnavailableError, match=r"limit of 3 connections.*max_connections"
        ):
            cluster.runtime.run(transport.request("good", BOOKIE, req, 5.0))
        for h in holders:
            h.close()
        wait_until(lambda: server(cluster).connections == 0)
        # Room again: the same client reconnects and is served.
        assert cluster.read_from_bookie(BOOKIE, lid, 0) == b"kept"
    assert read_all(client, lid) == [b"kept"]


# -- a frame begun and never finished; a connection left idle ---------------------------------


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
@pytest.mark.parametrize(
    "partial",
    [struct.pack(">I", MAX_FRAME), struct.pack(">I", 1000) + b"x" * 10, b"\x00\x00"],
    ids=["64MiB-prefix-no-body", "part-of-a-body", "part-of-a-prefix"],
)
def test_a_frame_that_stalls_is_closed(make_cluster: Any, tls: bool, partial: bytes) -> None:
    # The idle timeout far above the partial-frame one: it is the stall that is caught.
    cluster = make_cluster(
        3, transport="tcp", tls=tls, partial_frame_timeout=0.3, idle_timeout=600.0
    )
    client = cluster.client("good")
    lid = write_entries(client, [b"before"])
    with raw_connection(cluster) as attacker:
        attacker.sendall(partial)
        wait_closed_by_peer(attacker)
    assert read_all(client, lid) == [b"before"]
    wait_until(lambda: server(cluster).connections == 1)  # the good client's, untouched


def test_a_tls_handshake_never_begun_is_closed(make_cluster: Any) -> None:
    cluster = make_cluster(1, transport="tcp", tls=True, partial_frame_timeout=0.3)
    host, port = parse_address(cluster.transport.address(BOOKIE))
    with socket.create_connection((host, port)) as sock:
        wait_closed_by_peer(sock)


def test_idle_connections_are_closed_and_clients_reconnect(make_cluster: Any) -> None:
    cluster = make_cluster(3, transport="tcp", idle_timeout=0.3, long_poll_max=1.0)
    client = cluster.client("w")
    wh = client.create_ledger(3, 3, 2)
    wh.add(b"0")
    conns = dict(cluster.transport.client._conns)
    assert set(conns) == set(cluster.bookie_ids)
    with raw_connection(cluster) as silent:  # connects, says nothing
        wait_closed_by_peer(silent)
    wait_until(lambda: all(c.closed for c in conns.values()))
    wait_until(lambda: all(server(cluster, b).connections == 0 for b in cluster.bookie_ids))
    # The writer goes on without an error: new connections, same ensemble.
    for i in range(1, 5):
        wh.add(b"%d" % i)
    assert list(wh.metadata.ensembles) == [0]  # no bookie was taken for a failed one
    assert [e.data for e in wh.read(0, 4)] == [b"%d" % i for i in range(5)]
    # A request in progress is no idleness: a long poll outlasting idle_timeout is answered.
    req = Request(OpCode.READ_LAC, next_txn(), wh.ledger_id, 4, timeout_ms=800)
    resp = cluster.runtime.run(cluster.transport.client.request("w", BOOKIE, req, 5.0))
    assert resp.status == StatusCode.EOK


def test_a_client_that_stops_taking_answers_is_closed_as_idle(make_cluster: Any) -> None:
    """It holds up to max_unsent_answer_bytes of the bookie's memory, but only until it has
    taken nothing for idle_timeout."""
    cluster = make_cluster(3, transport="tcp", idle_timeout=0.5)
    client = cluster.client("good")
    lid = write_entries(client, [b"y" * MiB])
    reads = b"".join(frame(Request(OpCode.READ, next_txn(), lid, 0)) for _ in range(50))
    with raw_connection(cluster) as attacker:
        attacker.sendall(reads)
        wait_until(lambda: on_loop(cluster, server(cluster).unsent_bytes) > 0)  # held for it
        wait_until(lambda: server(cluster).connections == 0)
        assert on_loop(cluster, server(cluster).unsent_bytes) == 0
    assert read_all(client, lid) == [b"y" * MiB]
