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

# Lines are hashed in batches of this many: the digest of their concatenation (each line
# and its newline) is the digest of the lines one by one. With the stamp formatted once
# per instant, an event costs 1.7 us, not 2.1 (tracing is 4% of a race history's CPU).
_HASH_BATCH = 256


@define
class Trace:
    """The history of one seed: events stamped with virtual time, hashed as they come."""

    loop: asyncio.AbstractEventLoop
    keep: bool = True
    events: list[str] = field(factory=list)
    count: int = 0
    _hash: Any = field(factory=hashlib.sha256)
    _unhashed: list[str] = field(factory=list)  # lines not yet in _hash
    _now: float = -1.0  # the virtual time _stamp is of
    _stamp: str = ""

    def __call__(self, *event: object) -> None:
        now = self.loop.time()
        if now != self._now:
            self._now, self._stamp = now, f"{now:.7f} "
        line = self._stamp + " ".join(map(str, event))
        self.count += 1
        if self.keep:
            self.events.append(line)
        unhashed = self._unhashed
        unhashed.append(line)
        if len(unhashed) >= _HASH_BATCH:
            self._hash_unhashed()

    def _hash_unhashed(self) -> None:
        if self._unhashed:
            self._unhashed.append("")  # the last line's newline
            self._hash.update("\n".join(self._unhashed).encode())
            self._unhashed.clear()

    def digest(self) -> str:
        self._hash_unhashed()
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
