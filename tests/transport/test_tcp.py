"""The TCP transport against a stand-in bookie, on real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from embedlog.errors import BKTimeoutError, BookieUnavailableError
from embedlog.transport import tls
from embedlog.transport.base import next_txn
from embedlog.transport.faults import NetworkFaults
from embedlog.transport.inprocess import InProcessTransport
from embedlog.transport.tcp import (
    MAX_FRAME,
    BookieServer,
    TcpTransport,
    parse_address,
    stable_address,
)
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import AddFlags, OpCode, ReadFlags, Request, Response

BOOKIE = "bookie-1"


class FakeBookie:
    """Answers every request with its body echoed; ``delays`` slows chosen entry ids down."""

    def __init__(self) -> None:
        self.delays: dict[int, float] = {}
        self.received: list[tuple[float, Request]] = []

    async def handle(self, req: Request) -> Response:
        self.received.append((time.monotonic(), req))
        if d := self.delays.get(req.entry_id):
            await asyncio.sleep(d)
        return Response.to(req, StatusCode.EOK, entry_id=req.entry_id, body=req.body)


def add(entry_id: int, body: bytes = b"x", **kw: Any) -> Request:
    return Request(OpCode.ADD, next_txn(), 7, entry_id, body=body, **kw)


def run(coro_fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(coro_fn(), 60))  # type: ignore[arg-type]


class Rig:
    """A started BookieServer around a FakeBookie, and a TcpTransport resolving to it."""

    def __init__(self, ssl_server: Any = None, ssl_client: Any = None) -> None:
        self.bookie = FakeBookie()
        self.server = BookieServer(self.bookie, ssl_context=ssl_server)
        self.faults = NetworkFaults()
        self.client = TcpTransport(
            lambda bid: self.server.address if bid == BOOKIE else None,
            self.faults,
            ssl_client,
        )

    async def __aenter__(self) -> Rig:
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.close()
        await self.server.close()


async def recv_frame(reader: asyncio.StreamReader) -> Response:
    (n,) = struct.unpack(">I", await reader.readexactly(4))
    return Response.decode(await reader.readexactly(n))


# -- frames and connections ---------------------------------------------------------------------


def test_round_trip_keeps_every_field() -> None:
    async def main() -> None:
        async with Rig() as rig:
            assert rig.server.port > 0
            req = add(3, b"payload" * 1000, term=5, flags=AddFlags.RECOVERY, master_key=b"k")
            resp = await rig.client.request("c1", BOOKIE, req, 5)
            assert (resp.op, resp.txn, resp.status, resp.entry_id) == (
                OpCode.ADD,
                req.txn,
                StatusCode.EOK,
                3,
            )
            assert resp.body == req.body
            _, seen = rig.bookie.received[0]
            assert seen == req  # the bookie decoded exactly what was sent

    run(main)


def test_large_frame_round_trip() -> None:
    async def main() -> None:
        async with Rig() as rig:
            body = bytes(range(256)) * (8 * 1024 * 4)  # 8 MiB: many socket reads per frame
            resp = await rig.client.request("c1", BOOKIE, add(0, body), 30)
            assert resp.body == body

    run(main)


def test_pipelined_answers_come_back_out_of_order() -> None:
    async def main() -> None:
        async with Rig() as rig:
            rig.bookie.delays = {0: 0.5, 1: 0.25}
            order: list[int] = []

            async def one(e: int) -> None:
                resp = await rig.client.request("c1", BOOKIE, add(e, str(e).encode()), 5)
                assert resp.entry_id == e and resp.body == str(e).encode()
                order.append(e)

            start = time.monotonic()
            await asyncio.gather(*(one(e) for e in range(5)))
            # Handled concurrently (not one after another) and answered as each finished.
            assert time.monotonic() - start < 0.7
            assert order[-2:] == [1, 0]
            assert len(rig.client._conns) == 1  # all on one connection

    run(main)


def test_one_connection_is_shared_and_reopened_after_server_restart() -> None:
    async def main() -> None:
        async with Rig() as rig:
            await rig.client.request("c1", BOOKIE, add(0), 5)
            port = rig.server.port
            await rig.server.close()
            with pytest.raises(BookieUnavailableError):
                await rig.client.request("c1", BOOKIE, add(1), 5)
            rig.server = BookieServer(rig.bookie, port=port)
            await rig.server.start()
            resp = await rig.client.request("c1", BOOKIE, add(2), 5)
            assert resp.entry_id == 2

    run(main)


def test_garbage_closes_that_connection_but_the_server_keeps_serving(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        async with Rig() as rig:
            reader, writer = await asyncio.open_connection("127.0.0.1", rig.server.port)
            garbage = b"\xff" * 40
            writer.write(struct.pack(">I", len(garbage)) + garbage)
            await writer.drain()
            assert await asyncio.wait_for(reader.read(), 5) == b""  # closed, nothing answered
            writer.close()
            # Other connections, and new ones, are unaffected.
            resp = await rig.client.request("c1", BOOKIE, add(1), 5)
            assert resp.status == StatusCode.EOK

    with caplog.at_level(logging.WARNING):
        run(main)
    assert "undecodable" in caplog.text


def test_oversized_frame_closes_the_connection(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async with Rig() as rig:
            await rig.client.request("c1", BOOKIE, add(0), 5)
            reader, writer = await asyncio.open_connection("127.0.0.1", rig.server.port)
            writer.write(struct.pack(">I", MAX_FRAME + 1))
            await writer.drain()
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
            assert rig.bookie.received[-1][1].entry_id == 0  # nothing reached the bookie
            resp = await rig.client.request("c1", BOOKIE, add(1), 5)
            assert resp.status == StatusCode.EOK

    with caplog.at_level(logging.WARNING):
        run(main)
    assert "exceeds" in caplog.text


def test_raw_client_speaks_the_frame_format() -> None:
    """The frame format is exactly: u32 big-endian length, then one codec frame."""

    async def main() -> None:
        async with Rig() as rig:
            reader, writer = await asyncio.open_connection("127.0.0.1", rig.server.port)
            reqs = [add(e, b"abc") for e in range(3)]
            frames = [r.encode() for r in reqs]
            writer.write(b"".join(struct.pack(">I", len(f)) + f for f in frames))
            await writer.drain()
            got = {(await recv_frame(reader)).txn for _ in reqs}
            assert got == {r.txn for r in reqs}
            writer.close()

    run(main)


def test_truncated_frame_then_hangup_does_not_hurt_the_server() -> None:
    async def main() -> None:
        async with Rig() as rig:
            _reader, writer = await asyncio.open_connection("127.0.0.1", rig.server.port)
            writer.write(struct.pack(">I", 1000) + b"only a little")
            await writer.drain()
            writer.close()
            await asyncio.sleep(0.05)
            assert (await rig.client.request("c1", BOOKIE, add(0), 5)).status == StatusCode.EOK

    run(main)


def test_server_close_fails_in_flight_requests_at_once() -> None:
    async def main() -> None:
        async with Rig() as rig:
            rig.bookie.delays = {0: 30}
            pending = asyncio.create_task(rig.client.request("c1", BOOKIE, add(0), 20))
            await asyncio.sleep(0.2)
            start = time.monotonic()
            await rig.server.close()
            with pytest.raises(BookieUnavailableError):
                await pending
            assert time.monotonic() - start < 2  # not the 20 s timeout

    run(main)


def test_connection_refused_is_unavailable_and_unknown_bookie_too() -> None:
    async def main() -> None:
        async with Rig() as rig:
            port = rig.server.port
            await rig.server.close()
            with pytest.raises(BookieUnavailableError, match=f"127.0.0.1:{port}"):
                await rig.client.request("c1", BOOKIE, add(0), 5)
            with pytest.raises(BookieUnavailableError, match="no address"):
                await rig.client.request("c1", "bookie-9", add(0), 5)

    run(main)


def test_no_answer_in_time_is_a_timeout_and_the_connection_survives() -> None:
    async def main() -> None:
        async with Rig() as rig:
            rig.bookie.delays = {0: 1.0}
            with pytest.raises(BKTimeoutError):
                await rig.client.request("c1", BOOKIE, add(0), 0.2)
            assert (await rig.client.request("c1", BOOKIE, add(1), 5)).entry_id == 1
            await asyncio.sleep(1.0)  # the late answer to entry 0 arrives and is ignored
            conn = rig.client._conns[BOOKIE]
            assert not conn.closed and not conn._pending

    run(main)


def test_async_resolver_is_awaited() -> None:
    async def main() -> None:
        bookie = FakeBookie()
        server = BookieServer(bookie)
        await server.start()

        async def resolve(bid: str) -> str | None:
            await asyncio.sleep(0)
            return server.address

        client = TcpTransport(resolve)
        try:
            assert (await client.request("c1", BOOKIE, add(0), 5)).status == StatusCode.EOK
        finally:
            await client.close()
            await server.close()

    run(main)


# -- fault injection, the same over TCP as in-process --------------------------------------------


@pytest.fixture(params=["tcp", "inprocess"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class FaultRig:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.bookie = FakeBookie()
        self.faults = NetworkFaults()
        self.server = BookieServer(self.bookie)
        self.transport: Any = None

    async def __aenter__(self) -> FaultRig:
        if self.kind == "tcp":
            await self.server.start()
            self.transport = TcpTransport(lambda b: self.server.address, self.faults)
        else:
            self.transport = InProcessTransport(lambda b: self.bookie, self.faults)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.transport.close()
        await self.server.close()

    async def ask(self, req: Request, timeout: float = 5, src: str = "c1") -> Response:
        return await self.transport.request(src, BOOKIE, req, timeout)


def test_block_loses_requests_until_unblocked(kind: str) -> None:
    async def main() -> None:
        async with FaultRig(kind) as rig:
            rig.faults.block("c1", BOOKIE)
            with pytest.raises(BKTimeoutError):
                await rig.ask(add(0), 0.2)
            assert rig.bookie.received == []
            # Other clients are not affected.
            assert (await rig.ask(add(1), src="c2")).entry_id == 1
            rig.faults.unblock("c1", BOOKIE)
            assert (await rig.ask(add(2))).entry_id == 2

    run(main)


def test_replies_are_lost_while_blocked(kind: str) -> None:
    async def main() -> None:
        async with FaultRig(kind) as rig:
            rig.bookie.delays = {0: 0.3}
            pending = asyncio.create_task(rig.ask(add(0), 1.0))
            await asyncio.sleep(0.1)  # the request reached the bookie ...
            rig.faults.block("c1", BOOKIE)  # ... and its reply is lost on the way back
            with pytest.raises(BKTimeoutError):
                await pending
            assert [r.entry_id for _, r in rig.bookie.received] == [0]

    run(main)


def test_drop_next_loses_only_that_kind_and_count(kind: str) -> None:
    async def main() -> None:
        async with FaultRig(kind) as rig:
            rig.faults.drop_next("c1", BOOKIE, "add", count=2)
            fence = Request(OpCode.READ, next_txn(), 7, -1, flags=ReadFlags.FENCE)
            assert (await rig.ask(fence)).status == StatusCode.EOK  # a fence is not an add
            for e in (0, 1):
                with pytest.raises(BKTimeoutError):
                    await rig.ask(add(e), 0.2)
            assert (await rig.ask(add(2))).entry_id == 2
            assert [r.kind for _, r in rig.bookie.received] == ["fence", "add"]

    run(main)


def test_delayed_request_is_still_delivered_late(kind: str) -> None:
    async def main() -> None:
        async with FaultRig(kind) as rig:
            rig.faults.delay("c1", BOOKIE, 0.5)
            start = time.monotonic()
            with pytest.raises(BKTimeoutError):
                await rig.ask(add(0, b"late"), 0.1)
            assert rig.bookie.received == []
            await asyncio.sleep(0.8)
            assert len(rig.bookie.received) == 1
            arrived, req = rig.bookie.received[0]
            assert req.body == b"late" and arrived - start >= 0.45
            # A delay shorter than the timeout just slows the answer down.
            rig.faults.delay("c1", BOOKIE, 0.2)
            t0 = time.monotonic()
            assert (await rig.ask(add(1), 2)).entry_id == 1
            assert time.monotonic() - t0 >= 0.18
            rig.faults.heal()
            t0 = time.monotonic()
            await rig.ask(add(2))
            assert time.monotonic() - t0 < 0.15

    run(main)


# -- TLS ---------------------------------------------------------------------------------------


def test_tls_round_trip_and_wrong_ca_fails_clearly(tmp_path: Path) -> None:
    cert, key = tls.ensure_self_signed(tmp_path / "tls")
    other_ca, _ = tls.ensure_self_signed(tmp_path / "other")
    # The certificate is reused, not remade, while it is valid.
    assert tls.ensure_self_signed(tmp_path / "tls") == (cert, key)
    assert (tmp_path / "tls" / "cert.pem").read_bytes() == cert.read_bytes()

    async def main() -> None:
        server_ctx = tls.server_context(cert, key)
        async with Rig(server_ctx, tls.client_context(cert)) as rig:
            resp = await rig.client.request("c1", BOOKIE, add(0, b"secret"), 5)
            assert resp.body == b"secret"
            conn = rig.client._conns[BOOKIE]
            assert conn._writer.get_extra_info("ssl_object") is not None

            wrong = TcpTransport(
                lambda b: rig.server.address, ssl_context=tls.client_context(other_ca)
            )
            try:
                with pytest.raises(BookieUnavailableError, match="certificate verification failed"):
                    await wrong.request("c1", BOOKIE, add(1), 5)
            finally:
                await wrong.close()

            plain = TcpTransport(lambda b: rig.server.address)  # no TLS against a TLS bookie
            try:
                with pytest.raises((BookieUnavailableError, BKTimeoutError)):
                    await plain.request("c1", BOOKIE, add(2), 1)
            finally:
                await plain.close()
            # The server survived both.
            assert (await rig.client.request("c1", BOOKIE, add(3), 5)).entry_id == 3

    run(main)


# -- addresses ---------------------------------------------------------------------------------


def test_stable_address_is_kept_and_not_shared(tmp_path: Path) -> None:
    a = stable_address(tmp_path / "bookie-1")
    assert stable_address(tmp_path / "bookie-1") == a
    assert (tmp_path / "bookie-1" / "address").read_text().strip() == a
    b = stable_address(tmp_path / "bookie-2")
    assert parse_address(a)[1] != parse_address(b)[1]
    assert parse_address(a)[0] == "127.0.0.1"


@pytest.mark.parametrize("bad", ["", "host", "host:", ":80", "h:0", "h:70000", "h:x"])
def test_parse_address_rejects_malformed(bad: str) -> None:
    with pytest.raises(ValueError, match="host:port"):
        parse_address(bad)


def test_parse_address_ipv6() -> None:
    assert parse_address("[::1]:3181") == ("::1", 3181)


def test_closing_the_server_ends_its_connections_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Connections open when the server closes end without an error (on Python 3.11 a
    cancelled connection task made asyncio's own callback raise, logged per connection)."""

    async def main() -> None:
        async with Rig() as rig:
            writers = []
            # Idle, and stopped inside a length prefix and inside a frame.
            for partial in (b"", struct.pack(">I", 100)[:2], struct.pack(">I", 100) + b"x"):
                _reader, writer = await asyncio.open_connection(rig.server.host, rig.server.port)
                writer.write(partial)
                await writer.drain()
                writers.append(writer)
            while len(rig.server._readers) < 3:
                await asyncio.sleep(0.01)
            await rig.server.close()
            await asyncio.sleep(0.05)  # asyncio's callbacks for the ended connections
            for writer in writers:
                writer.close()

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        run(main)
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []
