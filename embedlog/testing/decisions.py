"""Numbered fault decisions, and the suppression set that turns some of them off.

Every fault the simulation injects (a crash, a clean stop, a restart, a wipe, a lost
request or answer, a delay spike, a held-up add, a full disk, a failing fsync, a failing
or slow metadata operation, an expired session, a strike, a blind spot) and every
workload step that can be left out (a recovery, a takeover, a trim, a writer's pause) is
first drawn from the seed as it always is, then numbered, in the order the history makes
them: decision 0, 1, 2, ... A history runs on one thread, so the same seed numbers the
same decisions the same way. ``--suppress 3,17,40`` replays the seed with those decisions
ignored: their draws are made all the same (draw, then ignore), so every other decision
keeps the randomness it had, and the history up to the first suppressed decision is the
original one, event for event. With nothing suppressed the history is exactly the seed's.

Event-level shrinking (shrink_events.py) searches suppression sets.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from attrs import frozen


class SuppressError(ValueError):
    """A --suppress value that is not a list of decision numbers (one line)."""


@frozen
class Decision:
    """A decision the history carried out: its number, virtual time, kind and details."""

    index: int
    time: float
    kind: str
    detail: tuple[str, ...]

    def __str__(self) -> str:
        return f"#{self.index} {self.time:.7f} {self.kind} {' '.join(self.detail)}".rstrip()


def parse_suppress(text: str) -> frozenset[int]:
    """``"3,17,40"`` -> {3, 17, 40} (what ``format_suppress`` gives back)."""
    numbers: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        if not part.isdigit():
            raise SuppressError(
                "--suppress takes decision numbers >= 0 separated by commas (e.g. 3,17,40), "
                f"got {text!r}"
            )
        numbers.add(int(part))
    return frozenset(numbers)


def format_suppress(numbers: Iterable[int]) -> str:
    return ",".join(map(str, sorted(numbers)))


class Decisions:
    """``decide(kind, *detail)``: True when decision number n (the next one) is carried
    out, False when the suppression set names it (traced as suppressed)."""

    def __init__(
        self,
        clock: Callable[[], float],
        trace: Callable[..., None],
        counts: Counter[str],
        suppressed: frozenset[int] = frozenset(),
    ) -> None:
        self._clock = clock
        self._trace = trace
        self._counts = counts
        self.suppressed = suppressed
        self.made = 0  # decisions numbered so far, suppressed ones included
        # (number, time, kind, details) of each decision carried out: kept raw, formatted
        # only when reported (a history makes thousands).
        self._carried: list[tuple[int, float, str, tuple[object, ...]]] = []

    def __call__(self, kind: str, *detail: object) -> bool:
        n = self.made
        self.made = n + 1
        if self.suppressed and n in self.suppressed:
            self._counts["suppressed"] += 1
            self._trace("suppressed", n, kind, *detail)
            return False
        self._carried.append((n, self._clock(), kind, detail))
        return True

    def carried(self) -> list[Decision]:
        return [Decision(n, t, k, tuple(map(str, d))) for n, t, k, d in self._carried]


def always(kind: str, *detail: object) -> bool:
    """The decider of a network or metadata store outside a simulation: nothing suppressed."""
    return True
