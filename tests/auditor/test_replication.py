"""Re-replication: what the checker finds missing is copied back, dead bookies are replaced."""

from __future__ import annotations

import time

from auditor_helpers import replace_disks, set_rack, write_closed

from embedlog.auditor.checker import MetadataChecker
from embedlog.auditor.replication import Replicator, check_entry
from embedlog.auditor.rules import assigned_entries
from embedlog.wire.entry import Digester, DigestType


def checker(cluster, **options) -> MetadataChecker:
    options.setdefault("recheck_delay", 0.0)
    return MetadataChecker(cluster.metadata, cluster.transport, cluster.runtime, **options)


def replicator(cluster, **options) -> Replicator:
    options.setdefault("recheck_delay", 0.0)
    return Replicator(cluster.metadata, cluster.transport, cluster.runtime, **options)


def test_wiped_bookie_is_refilled_and_the_next_check_is_clean(cluster) -> None:
    lid = write_closed(cluster, 30)
    md = cluster.metadata.read_ledger(lid)
    victim = md.ensembles[0][1]
    lost = assigned_entries(md)[victim]
    replace_disks(cluster, victim)
    assert [c for c, _, _ in checker(cluster).run().violations] == ["durability"]

    result = replicator(cluster).run()

    assert result.ok, result.ledgers
    assert result.ledgers[lid].copied == {victim: len(lost)}
    assert checker(cluster).run().violations == []
    for e in lost:
        assert cluster.read_from_bookie(victim, lid, e) == b"entry %d" % e
    assert lid not in cluster.metadata.underreplicated()
    # The ledger reads back whole through the normal client.
    rh = cluster.client("reader").open_ledger(lid)
    assert [x.data for x in rh.read(0, 29)] == [b"entry %d" % i for i in range(30)]


def test_copies_reach_a_fenced_ledger(cluster) -> None:
    # A recovered ledger is fenced on its bookies: plain adds are refused there, so the
    # copy must carry the recovery flag.
    lid = write_closed(cluster, 10)
    md = cluster.metadata.read_ledger(lid)
    victim = md.ensembles[0][0]
    bookie = cluster.bookie(victim)
    drop = assigned_entries(md)[victim]
    # The bookie loses the ledger's entries but keeps it, fenced (and its key, as BP-46
    # protection takes it from the metadata).
    cluster.runtime.run(bookie.storage.cut(lid, "all", 0, bookie.journal.lsn))
    cluster.runtime.run(bookie.set_ledger_state(lid, fenced=True, master_key=md.master_key))
    assert bookie.ledger_info(lid).fenced
    assert checker(cluster).run().ledgers[lid].missing == {victim: drop}

    assert replicator(cluster).run().ok
    assert checker(cluster).run().violations == []
    assert cluster.read_from_bookie(victim, lid, drop[0]) == b"entry %d" % drop[0]


def test_unavailable_bookie_is_replaced_in_the_ensemble(make_cluster) -> None:
    cluster = make_cluster(4)
    lid = write_closed(cluster, 24)
    md = cluster.metadata.read_ledger(lid)
    victim = md.ensembles[0][2]
    spare = next(b for b in cluster.bookie_ids if b not in md.ensembles[0])
    cluster.stop_bookie(victim)
    assert [c for c, _, _ in checker(cluster).run().violations] == ["bookie_unavailable"]

    result = replicator(cluster).run()

    assert result.ok, result.ledgers
    assert result.ledgers[lid].replaced == {victim: spare}
    after = cluster.metadata.read_ledger(lid)
    assert victim not in after.bookies() and spare in after.bookies()
    assert checker(cluster).run().violations == []
    for e in assigned_entries(after)[spare]:
        assert cluster.read_from_bookie(spare, lid, e) == b"entry %d" % e


def test_a_dead_bookie_stays_in_the_ensemble_until_every_entry_reached_its_replacement(
    make_cluster,
) -> None:
    # One copy to the spare is lost. Swapped in anyway, the spare would be named in the
    # metadata for an entry it does not hold: with WQ2, that entry's one other copy would
    # be its only one.
    cluster = make_cluster(4)
    lid = write_closed(cluster, 24)
    md = cluster.metadata.read_ledger(lid)
    victim = md.ensembles[0][2]
    spare = next(b for b in cluster.bookie_ids if b not in md.ensembles[0])
    cluster.stop_bookie(victim)
    cluster.network.drop_next("replicator", spare, "recovery_add")

    result = replicator(cluster, request_timeout=0.5).run()

    assert not result.ok and result.ledgers[lid].replaced == {}
    assert any(f"{victim} not replaced: only" in f for f in result.ledgers[lid].failures)
    assert cluster.metadata.read_ledger(lid).version == md.version
    assert victim in cluster.metadata.underreplicated()[lid]["bookies"]
    # The next run copies what is missing and swaps.
    result = replicator(cluster).run()
    assert result.ok and result.ledgers[lid].replaced == {victim: spare}
    assert checker(cluster).run().violations == []


def test_no_replacement_leaves_the_ledger_marked(cluster) -> None:
    lid = write_closed(cluster, 6)
    victim = cluster.metadata.read_ledger(lid).ensembles[0][0]
    cluster.stop_bookie(victim)

    result = replicator(cluster).run()

    assert not result.ok
    assert any("no bookie to replace" in f for f in result.ledgers[lid].failures)
    assert victim in cluster.metadata.underreplicated()[lid]["bookies"]
    # The mark keeps the checker quiet until it is too old; then it is reported.
    assert checker(cluster).run().violations == []
    late = checker(cluster, underreplicated_threshold=60.0, clock=lambda: time.time() + 61.0)
    assert [c for c, _, _ in late.run().violations] == ["underreplicated_too_long"]


def test_entries_no_replica_holds_are_reported_lost(cluster) -> None:
    lid = write_closed(cluster, 9)  # E3 WQ2: entries 0,3,6 live on slots 0 and 1 only
    md = cluster.metadata.read_ledger(lid)
    a, b, _ = md.ensembles[0]
    replace_disks(cluster, a)
    replace_disks(cluster, b)

    result = replicator(cluster).run()

    assert not result.ok
    assert sorted(set(result.ledgers[lid].lost)) == [0, 3, 6]
    assert lid in cluster.metadata.underreplicated()
    # Everything that had a surviving copy was restored.
    assert cluster.read_from_bookie(a, lid, 2) == b"entry 2"
    assert cluster.read_from_bookie(b, lid, 1) == b"entry 1"


def test_check_entry_refuses_corruption() -> None:
    d = Digester(DigestType.CRC32C)
    good = d.pack(4, 2, 1, b"payload")
    check_entry(good, 4, 2, DigestType.CRC32C)
    bad = good[:-1] + b"X"
    for body, lid, eid in ((bad, 4, 2), (good, 4, 3)):
        try:
            check_entry(body, lid, eid, DigestType.CRC32C)
        except Exception as exc:
            assert "digest" in str(exc) or "asked for" in str(exc)
        else:
            raise AssertionError("corrupt entry accepted")


def test_placement_violations_do_not_block_a_repair(cluster) -> None:
    # Replication restores copies; placement stays the checker's to report.
    lid = write_closed(cluster, 9)
    victim = cluster.metadata.read_ledger(lid).ensembles[0][0]
    replace_disks(cluster, victim)
    a, b, c = cluster.bookie_ids
    for bid, rack in ((a, "/r1"), (b, "/r1"), (c, "/r2")):
        set_rack(cluster, bid, rack)

    result = replicator(cluster).run()

    assert result.ok and result.ledgers[lid].repaired
    assert lid not in cluster.metadata.underreplicated()
    assert {cat for cat, _, _ in checker(cluster).run().violations} == {"placement"}
