"""A test-only mutant of the stream writer's LAFR: it passes an entry once WQ - 1
bookies of its write set confirmed it, not all of them. A context manager patching this
process."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from embedlog.unbounded import rules


@contextmanager
def lafr_one_short() -> Iterator[None]:
    passes = rules.lafr_passes

    def mutant(entry_id: int, acks: int, wq: int, first: int, hold: int = -1) -> bool:
        return passes(entry_id, acks + 1, wq, first, hold)

    rules.lafr_passes = mutant  # type: ignore[assignment]
    try:
        yield
    finally:
        rules.lafr_passes = passes
