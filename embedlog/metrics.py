"""What operators watch: counters and latency histograms of bookies and clients.

Every bookie has a ``BookieMetrics`` and every client a ``ClientMetrics``; the code that
does the work bumps plain attributes (an increment, or one ``bisect`` for a histogram:
no lock, no allocation), and readers take snapshots. ``LocalCluster.metrics()`` sums them
into plain numbers; ``embedlog.metrics_prometheus`` serves them to Prometheus.

Counters only grow (rates are differences over time, as Prometheus computes them).
Histograms keep counts per bucket, like Prometheus's: quantiles read from them are the
upper bound of the bucket the quantile falls in, so ``p99`` of a latency means "99% took
at most this long", to within a factor of two.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping

from attrs import frozen

# Seconds: 50 us, 100 us, 200 us, ... 52 s (a factor of two apart).
LATENCY_BUCKETS: tuple[float, ...] = tuple(5e-5 * 2**i for i in range(21))
# Records or entries: 1, 2, 4, ... 65536.
SIZE_BUCKETS: tuple[float, ...] = tuple(float(2**i) for i in range(17))


class Histogram:
    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.sum += value

    def observe_since(self, now: float, starts: Iterable[float]) -> None:
        """Observe ``now - s`` for every ``s`` of ``starts``.

        The speed trick of the add path: a writer acknowledges its entries in batches
        sharing one ``now``, so this costs one bisect per bucket the batch spans (one to
        three, typically) instead of one call and one bisect per entry. On
        benchmarks/bench_metrics.py that took the histograms' CPU cost per add from about
        3% to below 1%. A value within rounding of a bucket's edge may land in the next
        bucket (``now - s <= b`` is decided as ``s >= now - b``).
        """
        starts = sorted(starts)  # linear when already in order, as a writer's are
        n = len(starts)
        if not n:
            return
        bounds, counts = self.bounds, self.counts
        counted = 0
        i = bisect_left(bounds, now - starts[-1])  # the smallest value's bucket
        while counted < n and i < len(bounds):
            upto = n - bisect_left(starts, now - bounds[i])  # values at most bounds[i]
            counts[i] += upto - counted
            counted = upto
            i += 1
        counts[-1] += n - counted
        self.count += n
        self.sum += n * now - sum(starts)

    def merge(self, other: Histogram) -> None:
        for i, n in enumerate(other.counts):
            self.counts[i] += n
        self.count += other.count
        self.sum += other.sum

    def quantile(self, q: float) -> float:
        """The upper bound of the bucket holding the q-quantile (0.0 when empty; the
        largest bound for values above it)."""
        if not self.count:
            return 0.0
        rank = q * self.count
        seen = 0
        for i, n in enumerate(self.counts):
            seen += n
            if seen >= rank and n:
                return self.bounds[min(i, len(self.bounds) - 1)]
        return self.bounds[-1]

    def cumulative(self) -> Iterator[tuple[float, int]]:
        """(upper bound, observations at most that) per bucket, then (inf, count)."""
        seen = 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            seen += n
            yield bound, seen
        yield float("inf"), self.count

    def summary(self, name: str) -> dict[str, float]:
        return {
            f"{name}_count": self.count,
            f"{name}_sum": self.sum,
            f"{name}_p50": self.quantile(0.5),
            f"{name}_p99": self.quantile(0.99),
        }


class BookieMetrics:
    """One bookie's counters, bumped by its request handling, journal and flush."""

    __slots__ = (
        "add_requests",
        "entries_added",
        "flush_seconds",
        "journal_fsync_seconds",
        "journal_group_records",
        "read_requests",
        "rejected_requests",
    )

    def __init__(self) -> None:
        self.add_requests = 0  # ADD and ADD_BATCH requests served
        self.entries_added = 0  # entries those requests stored
        self.read_requests = 0  # READ and READ_BATCH
        self.rejected_requests = 0  # answered with an error status
        self.journal_fsync_seconds = Histogram(LATENCY_BUCKETS)  # write + fsync of a group
        self.journal_group_records = Histogram(SIZE_BUCKETS)  # records per group commit
        self.flush_seconds = Histogram(LATENCY_BUCKETS)  # write cache to entry logs + index


class ClientMetrics:
    """One client's counters, bumped by its writers and recoveries."""

    __slots__ = (
        "add_latency_seconds",
        "adds",
        "adds_failed",
        "ensemble_changes",
        "held_by_cursors",
        "recoveries",
    )

    def __init__(self) -> None:
        self.adds = 0  # acknowledged to the application
        self.adds_failed = 0
        self.add_latency_seconds = Histogram(LATENCY_BUCKETS)  # from add() to its ack
        self.ensemble_changes = 0
        self.recoveries = 0  # ledgers this client recovered (fenced and closed)
        # Per stream this client writes: (entries, payload bytes) kept beyond its retention
        # limits because a cursor holds retention back, as of the writer's last check.
        self.held_by_cursors: dict[int, tuple[int, int]] = {}

    def retention_held(self, ledger_id: int, entries: int, size: int) -> None:
        self.held_by_cursors[ledger_id] = (entries, size)


def sum_bookies(metrics: Iterable[BookieMetrics]) -> BookieMetrics:
    total = BookieMetrics()
    for m in metrics:
        total.add_requests += m.add_requests
        total.entries_added += m.entries_added
        total.read_requests += m.read_requests
        total.rejected_requests += m.rejected_requests
        total.journal_fsync_seconds.merge(m.journal_fsync_seconds)
        total.journal_group_records.merge(m.journal_group_records)
        total.flush_seconds.merge(m.flush_seconds)
    return total


def sum_clients(metrics: Iterable[ClientMetrics]) -> ClientMetrics:
    total = ClientMetrics()
    for m in metrics:
        total.adds += m.adds
        total.adds_failed += m.adds_failed
        total.add_latency_seconds.merge(m.add_latency_seconds)
        total.ensemble_changes += m.ensemble_changes
        total.recoveries += m.recoveries
        total.held_by_cursors.update(m.held_by_cursors)
    return total


def flatten(bookies: BookieMetrics, clients: ClientMetrics) -> dict[str, float]:
    """The plain numbers ``LocalCluster.metrics()`` reports (gauges are added there)."""
    out: dict[str, float] = {
        "adds": clients.adds,
        "adds_failed": clients.adds_failed,
        **clients.add_latency_seconds.summary("add_latency_seconds"),
        "ensemble_changes": clients.ensemble_changes,
        "recoveries": clients.recoveries,
        "bookie_add_requests": bookies.add_requests,
        "bookie_entries_added": bookies.entries_added,
        "bookie_read_requests": bookies.read_requests,
        "bookie_rejected_requests": bookies.rejected_requests,
        **bookies.journal_fsync_seconds.summary("journal_fsync_seconds"),
        **bookies.journal_group_records.summary("journal_group_records"),
        **bookies.flush_seconds.summary("flush_seconds"),
        "retention_held_entries": sum(e for e, _ in clients.held_by_cursors.values()),
        "retention_held_bytes": sum(b for _, b in clients.held_by_cursors.values()),
    }
    for lid, (entries, size) in sorted(clients.held_by_cursors.items()):
        out[f"stream_{lid}_retention_held_entries"] = entries
        out[f"stream_{lid}_retention_held_bytes"] = size
    return out


@frozen
class MetricsSnapshot:
    """A cluster's metrics at one moment: bookie and client totals, and gauges read now."""

    bookies: BookieMetrics
    clients: ClientMetrics
    gauges: Mapping[str, float]
