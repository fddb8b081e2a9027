"""Test-only mutants of the add pipeline's ack counting, where answers that land while an
ensemble change is in flight (or just after it) decide something: the simulator's late
answers and resets aimed at changes (simchanges.py, the ``*-corrupt`` scenarios) must
make an invariant see them. A mutant is a context manager patching the real code in this
process (``run_seed``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from seed_search import patched

from embedlog.ledger.pending import PendingAdd
from embedlog.ledger.pipeline import AddPipeline


def _on_all_ok_without_slot_check(
    self: AddPipeline, run: list[PendingAdd], idx: int, bookie: str, term: int
) -> None:
    """``AddPipeline.on_all_ok``'s fast path, counting a batch's EOK for the slot it was
    sent to without asking whether ``bookie`` still holds it (an ensemble change may have
    given the slot to another bookie meanwhile)."""
    if self.policy.counts(term):
        first, _ensemble = self.md.fragments[-1]
        lowest = min([p.entry_id for p in run])
        if lowest >= first and self.plain:
            bit = 1 << idx
            for p in run:
                if not (p.acks & bit or p.settled):
                    p.acks |= bit
                    p.acked += 1
        else:
            self.on_results(run, idx, bookie, [(0, term)] * len(run), 0.0)
            return
    self.complete()


def batch_acks_skip_slot_check() -> Any:
    return patched(AddPipeline, "on_all_ok", _on_all_ok_without_slot_check)


MUTANTS: dict[str, Callable[[], Any]] = {
    "batch-acks-skip-slot-check": batch_acks_skip_slot_check,
}
