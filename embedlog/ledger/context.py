"""What every ledger operation of one client shares: bookies, metadata, placement, settings."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, TypeVar

from attrs import define, field

from embedlog.clock import SYSTEM_CLOCK, Clock
from embedlog.ledger.admission import DEFAULT_MAX_ADDS_IN_FLIGHT, DEFAULT_MAX_BYTES_IN_FLIGHT
from embedlog.ledger.bookie_client import BookieClient
from embedlog.ledger.placement import PlacementPolicy
from embedlog.metadata.client import MetadataClient
from embedlog.metrics import ClientMetrics
from embedlog.wire.limits import DEFAULT_MAX_ENTRY_SIZE

T = TypeVar("T")


@define
class ClientContext:
    bookies: BookieClient
    metadata: MetadataClient
    placement: PlacementPolicy
    # How long a writer keeps retrying an entry that cannot reach its ack quorum
    # (no replacement bookie) before failing it with NotEnoughBookiesError.
    add_entry_quorum_timeout: float = 60.0
    # An idle writer sends its LAC explicitly after this long, so followers see the last
    # entry without waiting for the next one (0 disables).
    explicit_lac_interval: float = 0.2
    recovery_read_window: int = 16
    # Entries a writer has on the wire at once; more wait in its queue. Bounds the work
    # in flight so a burst of adds cannot push every request past its timeout.
    max_outstanding_adds: int = 1000
    # Client limits (embedlog/ledger/admission.py, docs/security.md): the largest payload
    # of an add, and per writing handle the adds in flight (entries and payload bytes)
    # before the next add waits for room, at most max_block_seconds (None: as long as it
    # takes; 0: raise TooManyAddsInFlightError at once).
    max_entry_size: int = DEFAULT_MAX_ENTRY_SIZE
    max_adds_in_flight: int = DEFAULT_MAX_ADDS_IN_FLIGHT
    max_bytes_in_flight: int = DEFAULT_MAX_BYTES_IN_FLIGHT
    max_block_seconds: float | None = None
    # UNSAFE, for tests only: break one recovery rule each, to show the damage the rule prevents.
    unsafe_recovery_reads_without_fence: bool = False  # the model's "Defect 1"
    unsafe_recovery_from_minus_one: bool = False  # the model's "Defect 2"
    # Unbounded ledgers: a takeover writes no truncate no-op (the article's log divergence).
    unsafe_takeover_without_noop: bool = False
    # An ensemble change keeps the replaced bookies' acks of the entries that move: an
    # entry may count as acknowledged with fewer than AQ copies in its write set.
    unsafe_ack_from_replaced_bookie: bool = False
    # Test-only switches of the simulator (embedlog chaos --list-unsafe), each restoring
    # one behaviour known to lose acknowledged entries; set on the context, not on Client:
    # recovery reads a timeout or an error as "entry absent";
    unsafe_unknown_as_negative: bool = False
    # a takeover leaves the last fragment's bookies outside its no-op's write set
    # uncleared (issue #12, race 1);
    unsafe_skip_clear_last_fragment: bool = False
    # entries complete with acks counted while an ensemble change is in flight, from a
    # bookie the new fragment no longer lists (race 3);
    unsafe_ack_during_replacement: bool = False
    # recovery ignores the terms entries carry (the aborted takeover's hole).
    unsafe_recovery_ignores_term: bool = False
    # Why the client that owns this context takes no more calls (None: it does).
    closed_reason: str | None = None
    metrics: ClientMetrics = field(factory=ClientMetrics)  # embedlog/metrics.py
    # Where every part of this client reads the time (embedlog/clock.py).
    clock: Clock = SYSTEM_CLOCK
    # Where the client's own random choices come from (which bookies a stream's next
    # fragment leaves out): a generator of its own, never the ``random`` module's shared
    # one, which any thread of the process draws from (the simulator passes a seeded one).
    rng: random.Random = field(factory=random.Random)

    @property
    def name(self) -> str:
        return self.bookies.name

    async def meta(self, fn: Callable[..., T], *args: Any) -> T:
        """Call the (blocking) metadata client without stalling the loop on slow stores."""
        return await self.metadata.call(fn, *args)

    async def writable_bookies(self) -> dict[str, dict[str, object]]:
        return await self.metadata.call(self.metadata.bookie_infos)
