"""Metrics: the histogram's arithmetic, what a cluster counts, and the Prometheus exporter."""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
import urllib.request

import pytest

from embedlog.cluster_bookies import repair_client_name
from embedlog.metrics import LATENCY_BUCKETS, Histogram

# (observations, q, expected quantile): the upper bound of the bucket holding the q-quantile.
QUANTILES = [
    ([], 0.5, 0.0),
    ([0.00001], 0.5, 5e-5),  # below the first bound
    ([0.00005], 0.5, 5e-5),  # on a bound: that bucket (le="5e-05")
    ([0.00006], 0.5, 1e-4),
    ([0.001] * 99 + [1.0], 0.5, 0.0016),
    ([0.001] * 99 + [1.0], 0.99, 0.0016),
    ([0.001] * 98 + [1.0] * 2, 0.99, 1.6384),
    ([1000.0], 0.5, LATENCY_BUCKETS[-1]),  # above every bound: the largest
]


@pytest.mark.parametrize(("values", "q", "expected"), QUANTILES)
def test_quantile_is_the_upper_bound_of_its_bucket(values, q, expected):
    h = Histogram(LATENCY_BUCKETS)
    for v in values:
        h.observe(v)
    assert h.quantile(q) == pytest.approx(expected)
    assert h.count == len(values)
    assert h.sum == pytest.approx(sum(values))


def test_cumulative_buckets_end_with_the_count_and_merge_adds_up():
    a, b = Histogram(LATENCY_BUCKETS), Histogram(LATENCY_BUCKETS)
    for v in (0.00001, 0.003, 0.003, 100.0):
        a.observe(v)
    b.observe(0.003)
    a.merge(b)
    cumulative = list(a.cumulative())
    assert cumulative[-1] == (float("inf"), 5)
    assert cumulative[0] == (5e-5, 1)
    assert dict(cumulative)[0.0032] == 4
    assert all(x[1] <= y[1] for x, y in itertools.pairwise(cumulative))


def test_a_cluster_counts_adds_reads_recoveries_and_keeps_counting_over_restarts(make_cluster):
    cluster = make_cluster(4)
    client = cluster.client("app")
    wh = client.create_ledger(3, 3, 2)
    futures = [wh.add_async(b"%d" % i) for i in range(200)]
    futures[-1].result()
    before = cluster.metrics()
    assert before["adds"] == 200
    assert before["add_latency_seconds_count"] == 200
    assert 0 < before["add_latency_seconds_p50"] <= before["add_latency_seconds_p99"]
    # Every entry went to the three bookies of its write set (some after the ack).
    assert before["bookie_entries_added"] >= 2 * 200
    assert before["journal_fsync_seconds_count"] >= 1
    assert before["journal_group_records_sum"] >= before["bookie_entries_added"] / 64
    assert before["bookies_running"] == 4 and before["ledgers"] >= 2
    assert before["disk_bytes"] > 200

    victim = client.ledger_metadata(wh.ledger_id).ensembles[0][0]
    cluster.crash_bookie(victim)
    for i in range(200, 220):
        wh.add(b"%d" % i)
    cluster.start_bookie(victim)
    after = cluster.metrics()
    assert after["ensemble_changes"] == 1
    assert after["adds"] == 220
    # The crashed bookie's counts were not lost with it: counters never go backwards.
    assert after["bookie_entries_added"] >= before["bookie_entries_added"]

    reader = cluster.client("reader")
    rh = reader.open_ledger(wh.ledger_id)  # recovers: the writer never closed it
    rh.read(0, 9)
    final = cluster.metrics()
    assert final["recoveries"] == 1
    assert final["bookie_read_requests"] >= 10
    assert final["adds_failed"] == 0


def test_limbo_ledgers_and_the_auditors_findings_are_reported(make_cluster):
    cluster = make_cluster(3, journal_write_data=False)
    wh = cluster.client("app").create_ledger(3, 3, 2)
    for i in range(10):
        wh.add(b"%d" % i)
    victim, *others = cluster.bookie_ids
    cluster.crash_bookie(victim)  # lost what it acked from its write cache
    # Its repair cannot reach its peers: the open ledger stays in limbo.
    for other in others:
        cluster.network.block(repair_client_name(victim), other)
    cluster.start_bookie(victim)
    assert cluster.metrics()["limbo_ledgers"] == 1
    cluster.network.heal()
    cluster.wait_repaired(victim)
    assert cluster.metrics()["limbo_ledgers"] == 0

    assert cluster.metrics()["auditor_checks"] == 0
    cluster.check_metadata()
    m = cluster.metrics()
    assert m["auditor_checks"] == 1
    assert {"auditor_placement", "auditor_durability"} <= set(m)


def test_prometheus_exporter_serves_what_the_cluster_counts(make_cluster):
    from prometheus_client.parser import text_string_to_metric_families

    from embedlog.prometheus import serve_metrics

    cluster = make_cluster(3, transport="tcp")
    wh = cluster.client("app").create_ledger(3, 3, 2)
    for i in range(50):
        wh.add(b"%d" % i)
    server = serve_metrics(cluster)
    try:
        text = urllib.request.urlopen(server.url, timeout=10).read().decode()
    finally:
        server.close()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["embedlog_adds"].type == "counter"
    assert families["embedlog_adds"].samples[0].value == 50
    latency = families["embedlog_add_latency_seconds"]
    assert latency.type == "histogram"
    counts = {s.labels.get("le"): s.value for s in latency.samples if s.name.endswith("_bucket")}
    assert counts["+Inf"] == 50
    assert families["embedlog_connections"].samples[0].value >= 3  # the client's to each bookie
    assert families["embedlog_bookies_running"].samples[0].value == 3


def test_without_prometheus_client_the_exporter_names_the_install_command(tmp_path):
    script = textwrap.dedent(
        """
        import sys
        sys.modules["prometheus_client"] = None  # as if it were not installed
        from embedlog import LocalCluster
        from embedlog.prometheus import serve_metrics
        with LocalCluster(1, sys.argv[1]) as cluster:
            try:
                serve_metrics(cluster)
            except ImportError as exc:
                print(exc)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "c")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "pip install 'embedlog[metrics]'" in out.stdout


@pytest.mark.parametrize(
    "latencies",
    [
        [],
        [0.00003],
        [0.012],
        [100.0],  # above every bound
        [0.00003, 0.00007, 0.0003, 0.004, 0.004, 2.5, 70.0],
        [0.9, 0.0001, 0.03],  # not in order
        [0.0101 + i * 1e-6 for i in range(64)],  # one full batch in one bucket
    ],
)
def test_observing_a_batch_since_its_starts_equals_observing_each_value(latencies):
    now = 36_000.25
    one, batch = Histogram(LATENCY_BUCKETS), Histogram(LATENCY_BUCKETS)
    for v in latencies:
        one.observe(v)
    batch.observe_since(now, (now - v for v in latencies))
    assert batch.counts == one.counts
    assert batch.count == one.count == len(latencies)
    assert batch.sum == pytest.approx(one.sum, abs=1e-6)
