"""The BP-34 checker against a LocalCluster: one test per category, and the clean case."""

from __future__ import annotations

import time

from auditor_helpers import replace_disks, set_rack, write_closed

from embedlog.auditor.checker import MetadataChecker
from embedlog.auditor.rules import assigned_entries, format_ids


def checker(cluster, **options) -> MetadataChecker:
    options.setdefault("recheck_delay", 0.0)
    return MetadataChecker(cluster.metadata, cluster.transport, cluster.runtime, **options)


def test_clean_cluster_reports_nothing(cluster) -> None:
    ids = [write_closed(cluster, 20), write_closed(cluster, 7, 3, 3, 2), write_closed(cluster, 0)]
    open_wh = cluster.client("other").create_ledger(3, 2, 2)
    open_wh.add(b"not closed")

    report = cluster.check_metadata()

    assert report.violations == []
    assert report.ok
    assert (report.checked, report.skipped_open) == (3, 1)
    # Every bookie was asked and answered exactly what its write sets assign it.
    for lid in ids:
        check = report.ledgers[lid]
        assert check.outcome == "checked"
        want = assigned_entries(check.metadata)
        assert {b: h.entry_ids() for b, h in check.held.items()} == want


def test_wiped_bookie_gives_durability_violations_naming_missing_entries(cluster) -> None:
    lid = write_closed(cluster, 20)
    md = cluster.metadata.read_ledger(lid)
    victim = md.ensembles[0][0]
    lost = assigned_entries(md)[victim]

    replace_disks(cluster, victim)
    report = cluster.check_metadata()

    assert [(c, ledger) for c, ledger, _ in report.violations] == [("durability", lid)]
    detail = report.violations[0].detail
    assert victim in detail and format_ids(lost) in detail
    assert report.ledgers[lid].missing == {victim: lost}


def test_stopped_bookie_is_unavailable_not_missing(cluster) -> None:
    lid = write_closed(cluster, 12)
    victim = cluster.metadata.read_ledger(lid).ensembles[0][1]
    cluster.stop_bookie(victim)

    report = checker(cluster).run()

    assert [(c, ledger) for c, ledger, _ in report.violations] == [("bookie_unavailable", lid)]
    assert victim in report.violations[0].detail
    assert "not registered" in report.violations[0].detail
    assert report.ledgers[lid].missing == {}


def test_timeouts_are_unknown_and_rechecked(cluster) -> None:
    lid = write_closed(cluster, 12)
    victim = cluster.metadata.read_ledger(lid).ensembles[0][2]
    cluster.network.block("auditor", victim)

    report = checker(cluster, request_timeout=0.2, rechecks=2).run()

    assert [(c, ledger) for c, ledger, _ in report.violations] == [("bookie_unavailable", lid)]
    detail = report.violations[0].detail
    assert "no answer in 0.2s" in detail and "still registered" in detail

    # A transient fault: once healed, the recheck finds the bookie and nothing is reported.
    cluster.network.heal()
    assert checker(cluster, request_timeout=0.2).run().violations == []


def test_rack_placement_violation(make_cluster) -> None:
    cluster = make_cluster(3)
    lid = write_closed(cluster, 6)  # E3 WQ2: every pair of bookies is some entry's write set
    assert checker(cluster).run().violations == []  # one rack: nothing to spread over

    a, b, c = cluster.bookie_ids
    set_rack(cluster, a, "/rack-1")
    set_rack(cluster, b, "/rack-1")
    set_rack(cluster, c, "/rack-2")
    report = checker(cluster).run()

    assert report.violations and {(cat, ledger) for cat, ledger, _ in report.violations} == {
        ("placement", lid)
    }
    assert any(a in d and b in d for _, _, d in report.violations)


def test_old_underreplicated_mark(cluster) -> None:
    lid = write_closed(cluster, 5)
    cluster.metadata.mark_underreplicated(lid, [cluster.bookie_ids[0]])

    fresh = checker(cluster, underreplicated_threshold=3600.0).run()
    assert fresh.violations == [] and fresh.skipped_underreplicated == 1

    later = checker(
        cluster, underreplicated_threshold=3600.0, clock=lambda: time.time() + 3601.0
    ).run()
    assert [(c, ledger) for c, ledger, _ in later.violations] == [("underreplicated_too_long", lid)]


def test_marked_ledger_is_skipped_not_reported(cluster) -> None:
    # BP-34: a ledger marked under-replicated (within the threshold) is being repaired.
    lid = write_closed(cluster, 9)
    victim = cluster.metadata.read_ledger(lid).ensembles[0][0]
    replace_disks(cluster, victim)
    assert [c for c, _, _ in checker(cluster).run().violations] == ["durability"]

    cluster.metadata.mark_underreplicated(lid, [victim])
    assert checker(cluster).run().violations == []
