"""Drive one Bookie directly (no cluster): boot, send requests, stop, crash, reboot."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from embedlog.bookie.bookie import Bookie
from embedlog.bookie.config import BookieConfig
from embedlog.metadata.client import MetadataClient
from embedlog.metadata.memory import MemoryMetadataStore
from embedlog.transport.base import next_txn
from embedlog.transport.server import BookieGoneError, serve_frame
from embedlog.wire.entry import Digester, DigestType, master_key
from embedlog.wire.messages import OpCode, Request, Response

KEY = master_key(b"pw")
DIGEST = Digester(DigestType.CRC32C)


def entry(lid: int, eid: int, payload: bytes = b"x", lac: int = -1) -> bytes:
    return DIGEST.pack(lid, eid, lac, payload)


class Harness:
    """``via="frames"`` sends requests as a transport does (encoded, through serve_frame,
    where plain adds take the bookie's no-task path); ``via="handle"`` awaits
    ``Bookie.handle``. The bookie tests run both ways: the two paths must agree."""

    def __init__(self, root: Path, via: str = "frames", **settings: Any) -> None:
        self.root = root
        self.via = via
        self.settings = settings
        self.store = MemoryMetadataStore()
        self.meta = MetadataClient(self.store)
        self.loop = asyncio.new_event_loop()
        self.bookie: Bookie | None = None

    def config(self, bookie_id: str = "b1") -> BookieConfig:
        return BookieConfig.from_settings(bookie_id, self.root / bookie_id, **self.settings)

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def boot(self, bookie_id: str = "b1") -> Bookie:
        self.bookie = Bookie(self.config(bookie_id), self.meta, self.store.session())
        self.run(self.bookie.start())
        return self.bookie

    def stop(self) -> None:
        assert self.bookie is not None
        self.run(self.bookie.stop())

    def crash(self) -> None:
        assert self.bookie is not None
        self.bookie.crash()
        self.run(asyncio.sleep(0))

    def request(self, op: OpCode, lid: int, eid: int = -1, **kw: Any) -> Response:
        assert self.bookie is not None
        kw.setdefault("master_key", KEY)
        return self.run(self.serve(Request(op, next_txn(), lid, eid, **kw)))

    async def serve(self, req: Request) -> Response:
        """One request the harness's way (see the class docstring)."""
        assert self.bookie is not None
        if self.via == "handle":
            return await self.bookie.handle(req)
        return await self.send_frame(req)

    async def send_frame(self, req: Request) -> Response:
        """One request as a transport delivers it; BookieGoneError if no answer will come."""
        assert self.bookie is not None
        answer: asyncio.Future[Response] = asyncio.get_running_loop().create_future()

        def reply(frame: bytes | None, gone: BaseException | None) -> None:
            if gone is not None:
                answer.set_exception(BookieGoneError(repr(gone)))
            elif frame is None:
                answer.set_exception(AssertionError("the bookie dropped the frame"))
            else:
                answer.set_result(Response.decode(frame))

        serve_frame(self.bookie, req.encode(), reply)
        return await answer

    def add(self, lid: int, eid: int, payload: bytes = b"x", **kw: Any) -> Response:
        return self.request(OpCode.ADD, lid, eid, body=entry(lid, eid, payload), **kw)

    def read(self, lid: int, eid: int, **kw: Any) -> Response:
        return self.request(OpCode.READ, lid, eid, **kw)

    def close(self) -> None:
        if self.bookie is not None and self.bookie.state.value == "serving":
            self.stop()
        self.loop.close()
