"""Test-only mutants of BP-46 phase one: a suspicious boot leaves the closed ledgers
that list the bookie out of limbo (it still fences them), or the ledgers under recovery
that it holds no state of (a write-back it acknowledged and lost), so the bookie
answers NoSuchEntry for entries it acknowledged and lost. The oracle must see it: it
takes what a boot must protect from the metadata as the boot began, not from the
bookie's limbo flags (which these mutants get wrong). Context managers patching this
process."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from seed_search import patched

from embedlog.bookie import boot
from embedlog.metadata.ledger_metadata import LedgerMetadata, LedgerState


@contextmanager
def closed_ledgers_out_of_limbo() -> Iterator[None]:
    owes = boot.owes_entries

    def mutant(md: LedgerMetadata, bookie_id: str, *, held: bool) -> bool:
        return False if md.is_closed else owes(md, bookie_id, held=held)

    with patched(boot, "owes_entries", mutant):
        yield


@contextmanager
def recovered_ledgers_out_of_limbo() -> Iterator[None]:
    owes = boot.owes_entries

    def mutant(md: LedgerMetadata, bookie_id: str, *, held: bool) -> bool:
        if md.state is LedgerState.IN_RECOVERY and bookie_id not in md.bookies():
            return held  # forgets that a write-back may have reached it
        return owes(md, bookie_id, held=held)

    with patched(boot, "owes_entries", mutant):
        yield
