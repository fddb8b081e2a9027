"""A writer's explicit LAC (its idle timer's and a stream's prompt LAC) carries the LAFR its
adds carry: a bookie records it in its own term (bookie/terms.py: lafr_recorded), so a
takeover after the writer went quiet reads forward from there."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from embedlog.ledger.explicit_lac import ExplicitLac
from embedlog.wire.messages import OpCode


class Bookies:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    async def call(self, bookie: str, op: OpCode, lid: int, eid: int, **kw: Any) -> None:
        self.calls.append((bookie, op, lid, eid, kw["term"], kw["lafr"]))


def test_the_explicit_lac_carries_the_writers_lafr() -> None:
    bookies = Bookies()
    ctx = SimpleNamespace(bookies=bookies)
    md = SimpleNamespace(ledger_id=7, last_fragment=(0, ("b1", "b2")))
    adds = SimpleNamespace(md=md, lac=4, error=None)
    lafr = [3]
    lac = ExplicitLac(ctx, adds, 2, b"k", lambda c: None, lambda: lafr[0], enabled=True)  # type: ignore[arg-type]
    asyncio.run(lac.send("b1", 4))
    lafr[0] = 4  # read at each send, as each add reads it
    asyncio.run(lac.send("b2", 4))
    assert bookies.calls == [
        ("b1", OpCode.WRITE_LAC, 7, 4, 2, 3),
        ("b2", OpCode.WRITE_LAC, 7, 4, 2, 4),
    ]
