"""Test-only mutants of the LAFR: a stream writer's that passes an entry once WQ - 1
bookies of its write set confirmed it, not all of them; a takeover's that announces its
end after a write-back that waited for the ack quorum only. Context managers patching
this process."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from seed_search import patched

from embedlog.unbounded import rules, takeover


@contextmanager
def lafr_one_short() -> Iterator[None]:
    passes = rules.lafr_passes

    def mutant(entry_id: int, acks: int, wq: int, first: int, hold: int = -1) -> bool:
        return passes(entry_id, acks + 1, wq, first, hold)

    with patched(rules, "lafr_passes", mutant):
        yield


@contextmanager
def writeback_at_ack_quorum() -> Iterator[None]:
    """A takeover's write-back completes an entry once AQ bookies confirmed it, not its
    whole write set, while the takeover still announces its end as every bookie's LAFR
    (takeover.announce_end): the claim is false for an entry one bookie missed."""
    real = takeover.TermWriter

    def mutant(*args: Any, **kw: Any) -> Any:
        kw["guaranteed_write_quorum"] = False
        return real(*args, **kw)

    with patched(takeover, "TermWriter", mutant):
        yield
