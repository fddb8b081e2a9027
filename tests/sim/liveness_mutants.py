"""A test-only mutant the simulator's liveness rule (``OperationsReturn``) must catch: a
context manager patching this process (run seeds with ``run_seed``, not in workers).

* ``refusal_of_acked_ignored``: a writer ignores a bookie's refusal (an EIO, a fence) of
  an entry it already acknowledged, streams too. A stream needs that entry on its whole
  write set before its next rollover, which then waits for ever.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from seed_search import patched

from embedlog.ledger.pending import PendingAdd
from embedlog.ledger.pipeline import AddPipeline
from embedlog.wire.codes import StatusCode


@contextmanager
def refusal_of_acked_ignored() -> Iterator[None]:
    on_refusal = AddPipeline._on_refusal

    def mutant(
        self: AddPipeline, p: PendingAdd, bookie: str, status: int, term: int, now: float
    ) -> None:
        if p.settled and status not in (StatusCode.EDELETED, StatusCode.EINVALIDTERM):
            return  # nothing more to do for an acknowledged entry, streams too
        on_refusal(self, p, bookie, status, term, now)

    with patched(AddPipeline, "_on_refusal", mutant):
        yield
