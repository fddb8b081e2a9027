"""Test-only mutants of the three bugs the mutant campaign's simulator let through
(docs/simulation.md, "Mutant campaign"), each a context manager patching this process:

* ``term_raise_answered_early``: an add that raises a ledger's term is answered as its
  state record is written, not once it is durable (journal off: from the write cache);
* ``truncation_repeats``: a truncation of the term the ledger was already cut in cuts
  again (a delayed duplicate of a takeover's no-op);
* ``pin_misses_fragment_first``: a stream writer may replace a bookie whose ack counted
  for the acknowledged entry at the new fragment's first id;
* ``noop_answered_from_write_cache``: with the journal off, a takeover's truncating
  no-op is acknowledged from the write cache like any add, not once its journal record
  is durable (the one survivor of tools/mutants/fresh.toml before
  ``NoOpDurableWhenAnswered``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import attrs
from seed_search import patched

from embedlog.bookie.adds import Adds, Cut
from embedlog.bookie.ledgers import LedgerTable
from embedlog.unbounded.policy import StreamPolicy
from embedlog.wire.messages import AddFlags


@contextmanager
def term_raise_answered_early() -> Iterator[None]:
    append_state = LedgerTable.append_state

    def mutant(self: LedgerTable, journal: Any, lid: int, record: bytes, then: Any = None) -> Any:
        fut = append_state(self, journal, lid, record)
        if then is not None:  # only an add that raises the term passes its answer here
            # Answered once the add is in the write cache, not once the record is durable.
            asyncio.get_running_loop().call_soon(then, None)
        return fut

    with patched(LedgerTable, "append_state", mutant):
        yield


@contextmanager
def truncation_repeats() -> Iterator[None]:
    truncate = Adds.truncate

    async def mutant(
        self: Adds, lid: int, master_key: str, at: int, term: int, digest_len: int | None
    ) -> Cut:
        storage = self.bookie.storage
        stored = storage.info(lid) if storage is not None else None
        if stored is not None and stored.truncated_term == term:
            stored.truncated_term = term - 1  # as if the check were `<`, not `<=`
        return await truncate(self, lid, master_key, at, term, digest_len)

    with patched(Adds, "truncate", mutant):
        yield


@contextmanager
def pin_misses_fragment_first() -> Iterator[None]:
    pinned = StreamPolicy.pinned

    def mutant(self: StreamPolicy, idx: int, first: int) -> bool:
        return pinned(self, idx, first + 1)

    with patched(StreamPolicy, "pinned", mutant):
        yield


@contextmanager
def noop_answered_from_write_cache() -> Iterator[None]:
    store_add = Adds._store_add

    def mutant(self: Adds, req: Any, plan: Any, on_durable: Any) -> Any:
        if req.flags & AddFlags.TRUNCATE and not self.config.journal_write_data:
            # Stored as a plain add: with the journal off, answered from the write cache.
            req = attrs.evolve(req, flags=req.flags & ~AddFlags.TRUNCATE)
        return store_add(self, req, plan, on_durable)

    with patched(Adds, "_store_add", mutant):
        yield
