"""The BP-34 checker against a LocalCluster: one test per category, and the clean case."""

from __future__ import annotations

import time

from auditor_helpers import replace_disks, set_rack, write_closed

from embedlog.auditor.checker import MetadataChecker
from embedlog.auditor.replication import LedgerRepair, Replicator
from embedlog.auditor.rules import assigned_entries, format_ids, fragment_ranges, swap_bookie
from embedlog.cluster_bookies import repair_client_name
from embedlog.transport.base import Transport
from embedlog.wire.messages import OpCode


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


def test_limbo_ledger_is_unknown_never_missing(make_cluster) -> None:
    # BP-46 meets BP-34: a bookie that crashed without a journal lost what it acknowledged
    # and holds the ledger in limbo until its repair ran. Its holes are not knowledge: it
    # answers LIST_ENTRIES with EUNKNOWN, which the checker treats like a timeout.
    cluster = make_cluster(
        3, journal_write_data=False, flush_interval=3600.0, repair_retry_interval=0.2
    )
    lid = write_closed(cluster, 12)
    victim = cluster.metadata.read_ledger(lid).ensembles[0][0]
    cluster.crash_bookie(victim)  # nothing was flushed: every entry of the ledger is gone
    for peer in cluster.bookie_ids:
        if peer != victim:
            cluster.network.block(repair_client_name(victim), peer)  # keep it in limbo
    cluster.start_bookie(victim)
    assert cluster.bookie(victim).ledger_info(lid).limbo

    report = checker(cluster, rechecks=2).run()

    assert [(c, ledger) for c, ledger, _ in report.violations] == [("bookie_unavailable", lid)]
    detail = report.violations[0].detail
    assert victim in detail and "EUNKNOWN" in detail and "still registered" in detail
    assert report.ledgers[lid].missing == {}

    cluster.network.heal()
    cluster.wait_repaired(victim)  # BP-46 phase two copies the lost entries back
    assert checker(cluster).run().violations == []


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


class _Hooked(Transport):
    """Delegates to the cluster's transport; runs ``hook`` before the first LIST_ENTRIES to
    ``bookie`` (something changing the cluster while the checker looks at it)."""

    def __init__(self, inner: Transport, bookie: str, hook) -> None:
        self.inner, self.bookie, self.hook, self.fired = inner, bookie, hook, 0

    async def request(self, src, bookie_id, req, timeout):
        if req.op == OpCode.LIST_ENTRIES and bookie_id == self.bookie and not self.fired:
            self.fired += 1
            self.hook()
        return await self.inner.request(src, bookie_id, req, timeout)


def test_metadata_changed_during_the_check_is_analysed_again(make_cluster) -> None:
    # BP-34: before reporting, re-read the metadata; if it changed (here: the wiped bookie
    # was replaced by a spare that holds its entries), analyse again instead of reporting.
    cluster = make_cluster(4)
    lid = write_closed(cluster, 12)
    md = cluster.metadata.read_ledger(lid)
    victim = md.ensembles[0][0]
    spare = next(b for b in cluster.bookie_ids if b not in md.ensembles[0])
    first = checker(cluster).run()
    held = first.ledgers[lid].held
    repair = LedgerRepair(lid)
    copy = Replicator(cluster.metadata, cluster.transport, cluster.runtime)._copy
    ids = assigned_entries(md)[victim]
    assert cluster.runtime.run(copy(md, spare, ids, held, repair)) == len(ids)
    replace_disks(cluster, victim)

    def swap() -> None:
        md = cluster.metadata.read_ledger(lid)
        cluster.metadata.write_ledger(swap_bookie(md, victim, spare, fragment_ranges(md)))

    hooked = _Hooked(cluster.transport, victim, swap)
    report = MetadataChecker(cluster.metadata, hooked, cluster.runtime, recheck_delay=0).run()

    assert hooked.fired == 1
    assert report.violations == []
    assert spare in report.ledgers[lid].metadata.bookies()


def test_ledger_marked_during_the_check_is_not_reported(cluster) -> None:
    lid = write_closed(cluster, 6)
    victim = cluster.metadata.read_ledger(lid).ensembles[0][1]
    replace_disks(cluster, victim)
    hooked = _Hooked(
        cluster.transport, victim, lambda: cluster.metadata.mark_underreplicated(lid, [victim])
    )
    report = MetadataChecker(cluster.metadata, hooked, cluster.runtime, recheck_delay=0).run()
    assert hooked.fired == 1
    assert report.violations == [] and report.skipped_underreplicated == 1
