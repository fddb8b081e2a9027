"""What one simulated history leaves behind: its trace (every event, stamped with virtual
time and hashed as it comes, so that two runs of a seed can be compared by one digest)
and its result (violations, counts, the trace's digest), which crosses to the chaos
command from worker processes."""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from typing import Any

import attrs
from attrs import define, field

from embedlog.testing.decisions import Decision
from embedlog.testing.oracle import Violation


@define
class Trace:
    """The history of one seed: events stamped with virtual time, hashed as they come."""

    loop: asyncio.AbstractEventLoop
    keep: bool = True
    events: list[str] = field(factory=list)
    count: int = 0
    _hash: Any = field(factory=hashlib.sha256)

    def __call__(self, *event: object) -> None:
        line = f"{self.loop.time():.7f} " + " ".join(map(str, event))
        self._hash.update(line.encode() + b"\n")
        self.count += 1
        if self.keep:
            self.events.append(line)

    def digest(self) -> str:
        return self._hash.hexdigest()


@define
class SeedResult:
    seed: int
    scenario: str
    unsafe: str | None
    violations: list[Violation]
    trace_hash: str
    events: int
    counts: Counter[str]
    virtual_seconds: float
    trace: list[str]
    limits: str = ""  # the --limit it ran under ("" : none)
    suppress: str = ""  # the --suppress it ran under ("": none)
    decisions: list[Decision] = attrs.Factory(list)  # the fault decisions carried out

    @property
    def ok(self) -> bool:
        return not self.violations
