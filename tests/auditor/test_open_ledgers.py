"""The checker and re-replication on open ledgers: every fragment but the last is sealed and is
checked and repaired like a closed ledger's; the last one is left to its writer."""

from __future__ import annotations

from auditor_helpers import replace_disks, write_open_with_a_sealed_fragment

from embedlog.auditor.checker import MetadataChecker
from embedlog.auditor.replication import Replicator
from embedlog.auditor.rules import assigned_entries
from embedlog.metadata.ledger_metadata import LedgerState
from embedlog.transport.base import Transport
from embedlog.wire.messages import AddFlags, OpCode


def checker(cluster, **options) -> MetadataChecker:
    options.setdefault("recheck_delay", 0.0)
    return MetadataChecker(cluster.metadata, cluster.transport, cluster.runtime, **options)


def replicator(cluster, transport=None, **options) -> Replicator:
    options.setdefault("recheck_delay", 0.0)
    transport = transport or cluster.transport
    return Replicator(cluster.metadata, transport, cluster.runtime, **options)


def kinds(report) -> list[tuple[str, int]]:
    return [(c, ledger) for c, ledger, _ in report.violations]


# -- bounded ledgers ---------------------------------------------------------------------------


def test_wiped_bookie_of_a_sealed_fragment_is_found_and_refilled(make_cluster) -> None:
    cluster = make_cluster(4)
    wh, victim = write_open_with_a_sealed_fragment(cluster, 12, 6)
    lid = wh.ledger_id
    replace_disks(cluster, victim)
    md = cluster.metadata.read_ledger(lid)
    lost = assigned_entries(md)[victim]
    assert lost and max(lost) < md.last_fragment[0]  # all in the sealed fragment

    report = checker(cluster).run()

    assert kinds(report) == [("durability", lid)]
    assert report.ledgers[lid].missing == {victim: lost}
    assert "OPEN ledger" in report.violations[0].detail
    assert (report.checked, report.checked_open, report.skipped_open) == (1, 1, 0)

    result = replicator(cluster).run()

    assert result.ok, result.ledgers
    assert result.ledgers[lid].copied == {victim: len(lost)}
    for e in lost:
        assert cluster.read_from_bookie(victim, lid, e) == b"entry %d" % e
    assert checker(cluster).run().violations == []
    # The writer never noticed: it goes on and closes, and the closed ledger is whole.
    for i in range(18, 22):
        wh.add(b"entry %d" % i)
    wh.close()
    assert checker(cluster).run().violations == []
    rh = cluster.client("reader").open_ledger(lid)
    assert [x.data for x in rh.read(0, 21)] == [b"entry %d" % i for i in range(22)]


def test_dead_bookie_of_a_sealed_fragment_is_replaced_without_disturbing_the_writer(
    make_cluster,
) -> None:
    cluster = make_cluster(5)
    wh, victim = write_open_with_a_sealed_fragment(cluster, 12, 6)
    lid = wh.ledger_id
    before = cluster.metadata.read_ledger(lid)
    assert kinds(checker(cluster).run()) == [("bookie_unavailable", lid)]

    result = replicator(cluster).run()

    assert result.ok, result.ledgers
    (spare,) = result.ledgers[lid].replaced.values()
    after = cluster.metadata.read_ledger(lid)
    # Swapped in the sealed fragment only; the writer's state and last fragment untouched.
    assert after.fragments[0][1] == tuple(spare if b == victim else b for b in before.ensembles[0])
    assert after.last_fragment == before.last_fragment
    assert (after.state, after.last_entry_id) == (LedgerState.OPEN, -1)
    for e in assigned_entries(after)[spare]:
        assert cluster.read_from_bookie(spare, lid, e) == b"entry %d" % e
    # The writer's metadata is stale now: its close loses the CAS, re-reads, and keeps the swap.
    wh.add(b"entry 18")
    wh.close()
    closed = cluster.metadata.read_ledger(lid)
    assert closed.is_closed and closed.last_entry_id == 18
    assert closed.fragments[0][1] == after.fragments[0][1]
    assert checker(cluster).run().violations == []


def test_an_ensemble_change_that_loses_to_a_swap_is_made_again_on_fresh_metadata(
    make_cluster,
) -> None:
    # replication-protocol.md: a writer whose ensemble change loses its CAS re-reads the
    # metadata and, the ledger still OPEN, replaces the bookie again on what it read, which
    # keeps the swap. Without the retry the writer would fail with a version conflict.
    cluster = make_cluster(6)
    wh, victim = write_open_with_a_sealed_fragment(cluster, 12, 6)
    lid = wh.ledger_id
    result = replicator(cluster).run()
    assert result.ok, result.ledgers
    swapped = cluster.metadata.read_ledger(lid)
    assert victim not in swapped.bookies()
    # The writer's metadata predates the swap. One of its bookies dies: its ensemble change
    # is a CAS at the old version.
    dying = swapped.last_fragment[1][1]
    cluster.crash_bookie(dying)
    assert wh.add(b"entry 18") == 18
    changed = cluster.metadata.read_ledger(lid)
    assert changed.fragments[:2] == swapped.fragments
    assert changed.fragments[2][0] == 18 and dying not in changed.fragments[2][1]
    wh.close()
    assert cluster.metadata.read_ledger(lid).fragments == changed.fragments
    rh = cluster.client("reader").open_ledger(lid)
    assert [x.data for x in rh.read(0, 18)] == [b"entry %d" % i for i in range(19)]


def test_the_last_fragment_of_an_open_ledger_is_not_checked(make_cluster) -> None:
    cluster = make_cluster(4)
    wh, victim = write_open_with_a_sealed_fragment(cluster, 9, 9)
    lid = wh.ledger_id
    replace_disks(cluster, victim)
    md = cluster.metadata.read_ledger(lid)
    # A bookie only in the last fragment loses its entries: the writer may still be writing
    # them (its end is not known), so nobody asks it and nothing is reported about it.
    (writing,) = set(md.last_fragment[1]) - set(md.ensembles[0])
    bookie = cluster.bookie(writing)
    cluster.runtime.run(bookie.storage.cut(lid, "all", 0, bookie.journal.lsn))

    report = checker(cluster).run()

    check = report.ledgers[lid]
    assert check.missing == {victim: assigned_entries(md)[victim]}
    assert writing not in check.held and writing not in check.unavailable
    assert all(writing not in detail for _, _, detail in report.violations)


# -- unbounded ledgers -------------------------------------------------------------------------


def stream_with_two_terms(cluster):
    """An unbounded stream with a new fragment every 5 entries, trimmed below entry 10, and
    taken over once (term 2 wrote a no-op). Returns the writer and the payloads by id."""
    first = cluster.client("first").create_unbounded(3, 2, 2, fragment_max_entries=5)
    payloads = {}
    for i in range(13):
        payloads[first.append(b"t1 %d" % i)] = b"t1 %d" % i
    second = cluster.client("second").open_unbounded(first.ledger_id)  # term 2, a no-op
    payloads[second.last_add_confirmed] = b""
    for i in range(14):
        payloads[second.append(b"t2 %d" % i)] = b"t2 %d" % i
    second.trim(10)
    md = cluster.metadata.read_ledger(first.ledger_id)
    assert md.fragments[0][0] == 10 and len(md.fragments) >= 4 and md.term == 2
    return second, payloads


def only_sealed(md) -> str:
    """A bookie in a sealed fragment and not in the last one."""
    sealed = {b for _, ens in md.fragments[:-1] for b in ens}
    return sorted(sealed - set(md.last_fragment[1]))[0]


def test_unbounded_wiped_bookie_of_sealed_fragments_is_found_and_refilled(make_cluster) -> None:
    cluster = make_cluster(5)
    ul, payloads = stream_with_two_terms(cluster)
    lid = ul.ledger_id
    md = cluster.metadata.read_ledger(lid)
    victim = only_sealed(md)
    replace_disks(cluster, victim)
    lost = assigned_entries(md)[victim]
    # Trimmed entries do not exist: nothing below the first fragment is asked for.
    assert lost and min(lost) >= 10 and max(lost) < md.last_fragment[0]

    report = checker(cluster).run()

    assert kinds(report) == [("durability", lid)]
    assert report.ledgers[lid].missing == {victim: lost}

    result = replicator(cluster).run()

    assert result.ok, result.ledgers
    assert result.ledgers[lid].copied == {victim: len(lost)}
    for e in lost:  # entries of both terms, the no-op too
        assert cluster.read_from_bookie(victim, lid, e) == payloads[e]
    assert checker(cluster).run().violations == []
    after = cluster.metadata.read_ledger(lid)
    assert (after.state, after.term, after.fragments) == (LedgerState.OPEN, 2, md.fragments)
    assert ul.append(b"still the writer") > max(payloads)


class _CopyHook(Transport):
    """The cluster's transport; before the first copy reaches its target, ``hook`` runs
    (the stream's writer changes the metadata between the check and the swap)."""

    def __init__(self, inner: Transport, hook) -> None:
        self.inner, self.hook, self.fired = inner, hook, 0

    async def request(self, src, bookie_id, req, timeout):
        if req.op == OpCode.ADD and req.flags & AddFlags.RECOVERY and not self.fired:
            self.fired += 1
            await self.hook()
        return await self.inner.request(src, bookie_id, req, timeout)


def test_unbounded_dead_bookie_is_swapped_in_although_the_writer_moved_on(make_cluster) -> None:
    cluster = make_cluster(6)
    ul, payloads = stream_with_two_terms(cluster)
    lid = ul.ledger_id
    md = cluster.metadata.read_ledger(lid)
    victim = only_sealed(md)
    cluster.stop_bookie(victim)
    assert kinds(checker(cluster).run()) == [("bookie_unavailable", lid)]

    async def writer_rolls_over() -> None:
        for i in range(6):  # fills the last fragment: the writer starts another by CAS
            payloads[await ul.append_aio(b"more %d" % i)] = b"more %d" % i

    hooked = _CopyHook(cluster.transport, writer_rolls_over)
    result = replicator(cluster, transport=hooked).run()

    assert hooked.fired == 1, result.ledgers
    assert result.ok, result.ledgers
    (spare,) = result.ledgers[lid].replaced.values()
    after = cluster.metadata.read_ledger(lid)
    assert len(after.fragments) > len(md.fragments)  # the writer's rollover is kept...
    assert victim not in after.bookies()  # ...and the swap landed after re-reading
    assert (after.state, after.term) == (LedgerState.OPEN, 2)
    for e in assigned_entries(after)[spare]:
        if e < md.last_fragment[0]:
            assert cluster.read_from_bookie(spare, lid, e) == payloads[e]
    assert checker(cluster).run().violations == []
    last = ul.append(b"still the writer")
    assert ul.read(last, last)[0].data == b"still the writer"


def test_no_swap_while_the_ledger_is_being_recovered(make_cluster) -> None:
    # A recovery ends with a CAS at the version it wrote; a swap in between would make a
    # bounded recovery start over and an unbounded takeover give up. Copies are left alone
    # too (the swap would be their only use); the mark keeps the ledger for the next run.
    cluster = make_cluster(5)
    wh, victim = write_open_with_a_sealed_fragment(cluster, 12, 6)
    lid = wh.ledger_id
    md = cluster.metadata.read_ledger(lid)
    recovering = cluster.metadata.write_ledger(md.evolve(state=LedgerState.IN_RECOVERY))
    check = checker(cluster).run().ledgers[lid]
    assert check.outcome == "checked" and victim in check.unavailable  # still checked

    result = replicator(cluster).run()

    repair = result.ledgers[lid]
    assert not result.ok and repair.replaced == {} and repair.copied == {}
    assert any("being recovered" in f for f in repair.failures)
    assert cluster.metadata.read_ledger(lid).version == recovering.version
    assert victim in cluster.metadata.underreplicated()[lid]["bookies"]


def test_mark_of_a_stream_trimmed_to_its_last_fragment_is_removed(cluster) -> None:
    # Marked while it had sealed fragments; trimmed since, nothing is left to repair. Left
    # marked, it would be reported as under-replicated too long.
    ul = cluster.client("writer").create_unbounded(3, 2, 2, fragment_max_entries=5)
    for i in range(12):
        ul.append(b"%d" % i)
    lid = ul.ledger_id
    cluster.metadata.mark_underreplicated(lid, [cluster.bookie_ids[0]])
    ul.trim(10)
    assert len(cluster.metadata.read_ledger(lid).fragments) == 1

    result = replicator(cluster).run()

    assert result.unmarked == [lid] and result.ok
    assert lid not in cluster.metadata.underreplicated()
