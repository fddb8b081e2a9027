"""A Prometheus exporter for a cluster's metrics (needs ``pip install 'embedlog[metrics]'``).

``serve_metrics(cluster, port)`` serves ``/metrics`` in Prometheus's text format on
127.0.0.1 (or ``host``); every scrape reads ``cluster.metrics_snapshot()``. Names are
``embedlog_<metric>``: counters end in ``_total``, latencies are histograms in
seconds, sizes of journal groups a histogram in records. docs/metrics.md lists them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from embedlog.metrics import Histogram, MetricsSnapshot

if TYPE_CHECKING:
    from embedlog.cluster import LocalCluster

INSTALL = "pip install 'embedlog[metrics]'"

# (name, help, how to read it from a snapshot)
_CLIENT_COUNTERS = (
    ("adds", "entries acknowledged to applications"),
    ("adds_failed", "adds failed to applications"),
    ("ensemble_changes", "bookies replaced in writers' ensembles"),
    ("recoveries", "ledgers recovered (fenced and closed) by clients"),
)
_BOOKIE_COUNTERS = (
    ("add_requests", "ADD and ADD_BATCH requests bookies stored"),
    ("entries_added", "entries bookies stored"),
    ("read_requests", "READ and READ_BATCH requests bookies served"),
    ("rejected_requests", "requests bookies refused with an error status"),
)
_HISTOGRAMS = (
    ("add_latency_seconds", "clients", "from add() to its acknowledgement"),
    ("journal_fsync_seconds", "bookies", "a journal group's write and fsync"),
    ("journal_group_records", "bookies", "records per journal group commit"),
    ("flush_seconds", "bookies", "a flush of the write cache to entry logs and index"),
)


def _import_client() -> Any:
    try:
        import prometheus_client
        import prometheus_client.core  # the metric families live here
    except ImportError:
        raise ImportError(f"the Prometheus exporter needs prometheus_client: {INSTALL}") from None
    return prometheus_client


def families(snap: MetricsSnapshot) -> Iterator[Any]:
    """The snapshot as prometheus_client metric families."""
    core = _import_client().core
    for name, doc in _CLIENT_COUNTERS:
        yield core.CounterMetricFamily(f"embedlog_{name}", doc, value=getattr(snap.clients, name))
    for name, doc in _BOOKIE_COUNTERS:
        yield core.CounterMetricFamily(
            f"embedlog_bookie_{name}", doc, value=getattr(snap.bookies, name)
        )
    for name, side, doc in _HISTOGRAMS:
        hist: Histogram = getattr(snap.clients if side == "clients" else snap.bookies, name)
        yield core.HistogramMetricFamily(
            f"embedlog_{name}",
            doc,
            buckets=[("+Inf" if b == float("inf") else repr(b), n) for b, n in hist.cumulative()],
            sum_value=hist.sum,
        )
    for name, value in sorted(snap.gauges.items()):
        yield core.GaugeMetricFamily(f"embedlog_{name}", name.replace("_", " "), value=value)
    for index, what in ((0, "entries"), (1, "bytes")):
        held = core.GaugeMetricFamily(
            f"embedlog_stream_retention_held_{what}",
            f"{what} a stream keeps beyond its retention limits because a cursor holds them",
            labels=["ledger"],
        )
        for lid, counts in sorted(snap.clients.held_by_cursors.items()):
            held.add_metric([str(lid)], counts[index])
        yield held


class _Collector:
    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster

    def collect(self) -> Iterator[Any]:
        return families(self.cluster.metrics_snapshot())


class MetricsServer:
    """The running exporter: ``.port``, ``.url``, ``.close()``."""

    def __init__(self, cluster: LocalCluster, port: int, host: str) -> None:
        client = _import_client()
        self.registry = client.CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(cluster))
        self._server, self._thread = client.start_http_server(
            port, addr=host, registry=self.registry
        )
        self.host = host
        self.port = int(self._server.server_port)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve_metrics(cluster: LocalCluster, port: int = 0, host: str = "127.0.0.1") -> MetricsServer:
    """Serve ``cluster``'s metrics at http://host:port/metrics (port 0: a free one)."""
    return MetricsServer(cluster, port, host)
