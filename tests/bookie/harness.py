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
from embedlog.wire.entry import Digester, DigestType, master_key
from embedlog.wire.messages import OpCode, Request, Response

KEY = master_key(b"pw")
DIGEST = Digester(DigestType.CRC32C)


def entry(lid: int, eid: int, payload: bytes = b"x", lac: int = -1) -> bytes:
    return DIGEST.pack(lid, eid, lac, payload)


class Harness:
    def __init__(self, root: Path, **settings: Any) -> None:
        self.root = root
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
        return self.run(self.bookie.handle(Request(op, next_txn(), lid, eid, **kw)))

    def add(self, lid: int, eid: int, payload: bytes = b"x", **kw: Any) -> Response:
        return self.request(OpCode.ADD, lid, eid, body=entry(lid, eid, payload), **kw)

    def read(self, lid: int, eid: int, **kw: Any) -> Response:
        return self.request(OpCode.READ, lid, eid, **kw)

    def close(self) -> None:
        if self.bookie is not None and self.bookie.state.value == "serving":
            self.stop()
        self.loop.close()
