"""Terms: takeovers, InvalidTermError, clients fighting over one ledger."""

from __future__ import annotations

import concurrent.futures
import logging
import threading

import pytest
from unbounded_helpers import replicas, stored, wait_until

from embedlog import InvalidTermError, LedgerRecoveryError, LedgerState


def test_append_after_a_takeover_raises_invalid_term_and_reopening_continues(cluster):
    c1, c2 = cluster.client("c1"), cluster.client("c2")
    ul1 = c1.create_unbounded(3, 3, 2)
    assert ul1.term == 1
    assert [ul1.append(b"a%d" % i) for i in range(3)] == [0, 1, 2]
    ul2 = c2.open_unbounded(ul1.ledger_id)
    assert ul2.term == 2
    assert c2.ledger_metadata(ul1.ledger_id).state is LedgerState.OPEN
    with pytest.raises(InvalidTermError):
        ul1.append(b"too late")
    with pytest.raises(InvalidTermError):
        ul1.append_async(b"still too late").result()
    assert ul2.append(b"b") == 4  # after the no-op at 3
    # The displaced writer takes over again and continues the same stream.
    ul1 = c1.open_unbounded(ul1.ledger_id)
    assert ul1.term == 3
    assert ul1.append(b"c") == 6
    with pytest.raises(InvalidTermError):
        ul2.append(b"x")
    r = cluster.client("r").open_unbounded(ul1.ledger_id, takeover=False)
    wait_until(lambda: r.read_last_add_confirmed() >= 6)
    assert [(e.entry_id, e.data) for e in r.read(0, 6)] == [
        (0, b"a0"),
        (1, b"a1"),
        (2, b"a2"),
        (4, b"b"),
        (6, b"c"),
    ]


def test_bounded_recovery_refuses_an_unbounded_ledger(cluster):
    ul = cluster.client("w").create_unbounded(3, 3, 2)
    ul.append(b"x")
    other = cluster.client("o")
    with pytest.raises(ValueError, match="unbounded"):
        other.open_ledger(ul.ledger_id)  # would fence and close the stream
    rh = other.open_ledger(ul.ledger_id, recover=False)  # plain reads are fine
    assert not rh.is_closed
    assert ul.append(b"y") == 1


def test_a_follower_never_disturbs_the_writer(cluster):
    ul = cluster.client("w").create_unbounded(3, 3, 2)
    ul.append(b"x")
    f = cluster.client("f").open_unbounded(ul.ledger_id, takeover=False)
    assert f.term == 1 and not f.is_writer
    with pytest.raises(InvalidTermError):
        f.append(b"followers hold no term")
    assert ul.append(b"y") == 1  # still the writer: the follower raised no term
    assert cluster.client("m").ledger_metadata(ul.ledger_id).term == 1


def test_stale_writer_is_refused_by_bookies_it_alone_can_reach(make_cluster):
    """The old writer's adds are refused by every bookie whose term was raised."""
    cluster = make_cluster(3)
    c1 = cluster.client("c1", request_timeout=5.0)
    ul1 = c1.create_unbounded(3, 3, 2)
    ul1.append(b"a")
    ul2 = cluster.client("c2").open_unbounded(ul1.ledger_id)
    fut = ul1.append_async(b"old term")
    with pytest.raises(InvalidTermError):
        fut.result()
    md = ul2.metadata
    for b in md.last_fragment[1]:
        assert stored(cluster, b, md.ledger_id, 2) is None  # never stored anywhere


def test_recovery_writes_reach_the_whole_write_set(make_cluster):
    """Guaranteed write quorum: a bookie that loses the no-op is retried or replaced
    before the takeover completes; every bookie of the last fragment holds the no-op."""
    cluster = make_cluster(4)
    ul1 = cluster.client("c1").create_unbounded(3, 3, 2)
    for i in range(5):
        ul1.append(b"e%d" % i)
    victim = ul1.metadata.last_fragment[1][0]
    c2 = cluster.client("c2", request_timeout=2.0)
    cluster.network.drop_next("c2", victim, "recovery_add", 100)
    ul2 = c2.open_unbounded(ul1.ledger_id)
    md = ul2.metadata
    noop = ul2.last_add_confirmed
    assert noop == 5
    for b in md.ensemble_for(noop):
        assert stored(cluster, b, md.ledger_id, noop) == b""
    for eid in range(noop + 1):
        assert len(set(replicas(cluster, md, eid).values())) == 1


def test_takeover_e5_wq2_aq2_with_two_non_adjacent_bookies_down(make_cluster):
    """The term raise needs quorum coverage in every write set, not E - AQ + 1 bookies:
    with slots 0 and 2 down each write set of 2 keeps one bookie that raised its term.
    Two spare bookies take the crashed ones' place for the recovery writes."""
    cluster = make_cluster(7)
    ul1 = cluster.client("c1").create_unbounded(5, 2, 2)
    for i in range(9):
        ul1.append(b"e%d" % i)
    ensemble = ul1.metadata.last_fragment[1]
    cluster.crash_bookie(ensemble[0])
    cluster.crash_bookie(ensemble[2])
    ul2 = cluster.client("c2", request_timeout=0.5).open_unbounded(ul1.ledger_id)
    assert ul2.term == 2 and ul2.last_add_confirmed == 9  # the no-op
    with pytest.raises(InvalidTermError):
        ul1.append(b"old term")
    assert ul2.append(b"new") == 10
    assert [e.data for e in ul2.read(0, 10)] == [b"e%d" % i for i in range(9)] + [b"new"]


def test_two_clients_fighting_over_the_ledger(make_cluster):
    """Alternating takeovers while both append: each takeover lands while the other client
    streams appends. Every entry acknowledged to either is readable, at its id, in one
    order, by every reader; every displaced stream ends with InvalidTermError."""
    cluster = make_cluster(4)
    lid = cluster.client("setup").create_unbounded(3, 3, 2).ledger_id
    clients = [cluster.client(n, request_timeout=5.0) for n in ("a", "b")]
    acked: dict[int, bytes] = {}
    counts: dict[int, int] = {}
    refused: list[int] = []
    lock = threading.Lock()

    def stream(ul, rnd: int) -> None:
        for batch in range(400):  # until displaced (a safety bound, never reached)
            datas = [b"%d-%d-%d" % (rnd, batch, i) for i in range(10)]
            futures = [ul.append_async(d) for d in datas]
            displaced = False
            for fut, data in zip(futures, datas, strict=True):
                try:
                    eid = fut.result()
                except InvalidTermError:
                    displaced = True
                    continue
                with lock:
                    assert acked.setdefault(eid, data) == data, f"id {eid} acknowledged twice"
                    counts[rnd] = counts.get(rnd, 0) + 1
            if displaced:
                with lock:
                    refused.append(rnd)
                return

    rounds = 8
    threads = []
    for rnd in range(rounds):
        ul = clients[rnd % 2].open_unbounded(lid)  # while the previous round streams
        t = threading.Thread(target=stream, args=(ul, rnd))
        t.start()
        threads.append(t)
        wait_until(lambda rnd=rnd: counts.get(rnd, 0) >= 30)
    closer = cluster.client("closer").open_unbounded(lid)  # displaces the last stream
    for t in threads:
        t.join()
    assert sorted(refused) == list(range(rounds))  # every stream was cut off by a term
    last = max(acked)
    views = []
    for name in ("r1", "r2"):
        r = cluster.client(name).open_unbounded(lid, takeover=False)
        wait_until(lambda r=r: r.read_last_add_confirmed() >= closer.last_add_confirmed)
        views.append([(e.entry_id, e.data) for e in r.read(0, last)])
    views.append([(e.entry_id, e.data) for e in closer.read(0, last)])
    assert views[0] == views[1] == views[2]
    seen = dict(views[0])
    for eid, data in acked.items():
        assert seen.get(eid) == data, f"acknowledged entry {eid} not readable as written"
    md = closer.metadata
    for eid in range(closer.last_add_confirmed + 1):
        assert len({v for v in replicas(cluster, md, eid).values() if v is not None}) <= 1


# -- a writer's metadata CAS that loses to another client ------------------------------------


@pytest.mark.parametrize("takeover", ["completed", "aborted"])
def test_an_ensemble_change_that_loses_to_a_takeover_raises_invalid_term(make_cluster, takeover):
    """The displaced writer hears nothing from its bookies (no EINVALIDTERM either): its
    ensemble change's CAS fails and the metadata it re-reads is another term's (or one
    IN_RECOVERY). Going ahead on the three spares, which never saw term 2, it would have
    an old term's entry acknowledged after the takeover."""
    cluster = make_cluster(6)
    ul1 = cluster.client("c1", request_timeout=0.5).create_unbounded(3, 3, 2)
    assert [ul1.append(b"e%d" % i) for i in range(3)] == [0, 1, 2]
    lid = ul1.ledger_id
    ensemble = ul1.metadata.last_fragment[1]
    c2 = cluster.client("c2", request_timeout=0.5)
    if takeover == "completed":
        assert c2.open_unbounded(lid).term == 2
    else:  # the term is raised, then the recovery aborts: IN_RECOVERY at term 2
        for b in ensemble:
            cluster.network.drop_next("c2", b, "recovery_read", count=100)
        with pytest.raises(LedgerRecoveryError):
            c2.open_unbounded(lid)
    taken = c2.ledger_metadata(lid)
    assert taken.term == 2
    if takeover == "aborted":  # the previous writer stays fenced by the state too
        assert taken.state is LedgerState.IN_RECOVERY
    for b in ensemble:
        cluster.network.block("c1", b)
    with pytest.raises(InvalidTermError, match="took over"):
        ul1.append(b"old term")
    assert c2.ledger_metadata(lid).version == taken.version
    spares = set(cluster.bookie_ids) - set(ensemble)
    assert all(not cluster.bookie(b).ledger_entries(lid) for b in spares)


def test_a_rollover_that_loses_to_a_takeover_raises_invalid_term(make_cluster):
    """The displaced writer's next append starts a fragment (the current one is full):
    the CAS adding it fails, and the metadata it re-reads is term 2's."""
    cluster = make_cluster(6)
    ul1 = cluster.client("c1").create_unbounded(3, 3, 2, fragment_max_entries=3)
    assert [ul1.append(b"e%d" % i) for i in range(3)] == [0, 1, 2]
    ul2 = cluster.client("c2").open_unbounded(ul1.ledger_id)
    taken = ul2.metadata
    with pytest.raises(InvalidTermError, match="took over"):
        ul1.append(b"old term")
    assert cluster.client("m").ledger_metadata(ul1.ledger_id).version == taken.version
    new = ul2.append(b"new term")
    assert [(e.entry_id, e.data) for e in ul2.read(0, new)] == [
        (0, b"e0"),
        (1, b"e1"),
        (2, b"e2"),
        (new, b"new term"),
    ]


def test_an_ensemble_change_that_loses_to_a_trim_is_made_again_on_fresh_metadata(
    make_cluster,
):
    """Another client trims the stream: the writer's metadata is stale, and the CAS of its
    next ensemble change fails. The ledger is still OPEN in its term, so it replaces the
    bookie again on the trimmed metadata, keeping the trim."""
    cluster = make_cluster(6)
    ul = cluster.client("c1").create_unbounded(3, 3, 2, fragment_max_entries=5)
    assert [ul.append(b"e%d" % i) for i in range(12)] == list(range(12))
    lid = ul.ledger_id
    follower = cluster.client("c2").open_unbounded(lid, takeover=False)
    follower.trim(10)
    trimmed = follower.metadata
    assert [first for first, _ in trimmed.fragments] == [10]
    dying = trimmed.last_fragment[1][0]
    cluster.crash_bookie(dying)
    assert ul.append(b"e12") == 12
    # AQ 2: the two live bookies may acknowledge e12 before the change is made.
    wait_until(lambda: len(cluster.client("m").ledger_metadata(lid).fragments) > 1)
    md = cluster.client("m").ledger_metadata(lid)
    assert [first for first, _ in md.fragments] == [10, 12]
    assert dying not in md.last_fragment[1] and (md.state, md.term) == (LedgerState.OPEN, 1)
    assert [e.data for e in ul.read(10, 12)] == [b"e10", b"e11", b"e12"]


def test_a_takeover_reads_forward_from_the_last_fragments_start(make_cluster):
    """The unbounded "Defect 2": the writer started a new fragment at 5 on two fresh bookies
    and died before any entry reached them, so they report LAFR -1. Reading forward from
    there would ask the new fragment's bookies about entries 0..4, find none, put the no-op
    at 0 and let the new term write over acknowledged entries."""
    cluster = make_cluster(4)
    c1 = cluster.client("c1", request_timeout=30.0)
    ul1 = c1.create_unbounded(2, 2, 2, fragment_max_entries=5)
    assert [ul1.append(b"e%d" % i) for i in range(5)] == list(range(5))
    lid = ul1.ledger_id
    fresh = set(cluster.bookie_ids) - set(ul1.metadata.last_fragment[1])
    for b in fresh:
        cluster.network.block("c1", b)
    ul1.append_async(b"e5")  # the new fragment is written by CAS; e5 never reaches it
    wait_until(lambda: len(c1.ledger_metadata(lid).fragments) == 2)
    first, ensemble = c1.ledger_metadata(lid).last_fragment
    assert first == 5 and set(ensemble) == fresh
    # c1 dies; its requests to the new fragment stay lost (a closed client's writer still
    # sends the entry its cancelled rollover held back).
    c1.close()
    ul2 = cluster.client("c2").open_unbounded(lid)
    assert ul2.append(b"new") == 6  # after the no-op at 5
    assert [e.data for e in ul2.read(0, 6)] == [b"e%d" % i for i in range(5)] + [b"new"]


def test_a_takeover_reads_forward_from_the_lafr_not_the_lac(cluster):
    """Entry 3 was acknowledged by two of the three bookies: the LAC passed it, the LAFR did
    not. Reading forward from the LAC, the takeover would leave the third bookie without
    it although the new term starts as if every entry below the no-op were on its whole
    write set."""
    c1 = cluster.client("c1", request_timeout=30.0)  # no resend of entry 3 during the test
    ul1 = c1.create_unbounded(3, 3, 2)
    assert [ul1.append(b"e%d" % i) for i in range(3)] == [0, 1, 2]
    lid = ul1.ledger_id
    ensemble = ul1.metadata.last_fragment[1]
    cluster.network.drop_next("c1", ensemble[2], "add")
    assert ul1.append(b"e3") == 3
    assert ul1.append(b"e4") == 4  # carries LAC 3 to every bookie
    assert stored(cluster, ensemble[2], lid, 3) is None
    c1.close()
    ul2 = cluster.client("c2").open_unbounded(lid)
    assert replicas(cluster, ul2.metadata, 3) == {b: b"e3" for b in ensemble}
    assert [e.data for e in ul2.read(0, 4)] == [b"e%d" % i for i in range(5)]


def test_a_takeover_whose_term_raise_cannot_cover_a_write_set_aborts(cluster):
    """Two of the three bookies never hear of term 2: they are an ack quorum that still
    takes the old term's adds, so the takeover must not recover anything yet."""
    ul1 = cluster.client("c1").create_unbounded(3, 3, 2)
    assert [ul1.append(b"e%d" % i) for i in range(3)] == [0, 1, 2]
    lid = ul1.ledger_id
    ensemble = ul1.metadata.last_fragment[1]
    for b in ensemble[1:]:
        cluster.network.block("c2", b)
    with pytest.raises(LedgerRecoveryError, match="reached only 1"):
        cluster.client("c2", request_timeout=0.5).open_unbounded(lid)
    md = cluster.client("m").ledger_metadata(lid)
    assert (md.state, md.term) == (LedgerState.IN_RECOVERY, 2)
    assert cluster.bookie(ensemble[0]).ledger_entries(lid) == [0, 1, 2]  # no no-op written
    cluster.network.heal()
    ul3 = cluster.client("c3").open_unbounded(lid)
    assert ul3.term == 3 and ul3.append(b"new") == 4
    assert [e.data for e in ul3.read(0, 4)] == [b"e0", b"e1", b"e2", b"new"]


def test_a_takeover_whose_closing_cas_loses_to_a_newer_term_yields(cluster):
    """c2's takeover (term 2) is slow at the bookies; meanwhile c3 raises the term to 3 in
    the metadata and aborts before any bookie hears of it. c2 finishes its recovery at
    term 2, and its CAS back to OPEN fails: it must not become the writer of a ledger whose
    metadata names another term."""
    ul1 = cluster.client("c1").create_unbounded(3, 3, 2)
    assert [ul1.append(b"e%d" % i) for i in range(3)] == [0, 1, 2]
    lid = ul1.ledger_id
    ensemble = ul1.metadata.last_fragment[1]
    check = cluster.client("m")
    for b in ensemble:
        cluster.network.delay("c2", b, 1.0)  # each of c2's steps at the bookies takes 1 s
        cluster.network.block("c3", b)
    c2 = cluster.client("c2")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        second = pool.submit(c2.open_unbounded, lid)
        wait_until(lambda: check.ledger_metadata(lid).term == 2)
        with pytest.raises(LedgerRecoveryError):
            cluster.client("c3", request_timeout=0.3).open_unbounded(lid)
        assert check.ledger_metadata(lid).term == 3
        with pytest.raises(InvalidTermError, match="took over while term 2 was recovering"):
            second.result()
    cluster.network.heal()
    ul4 = cluster.client("c4").open_unbounded(lid)
    assert ul4.term == 4
    last = ul4.append(b"new")
    assert [e.data for e in ul4.read(0, last)] == [b"e0", b"e1", b"e2", b"new"]


def test_a_takeover_fails_loudly_when_a_bookie_never_confirms_its_writes(cluster):
    """Guaranteed write quorum: the third bookie never confirms a recovery write and no
    other bookie can take its place. The takeover must fail once the add quorum timeout
    passes, never open the new term with a bookie of the last fragment that did not
    truncate."""
    ul1 = cluster.client("c1").create_unbounded(3, 3, 2)
    assert [ul1.append(b"e%d" % i) for i in range(3)] == [0, 1, 2]
    lid = ul1.ledger_id
    silent = ul1.metadata.last_fragment[1][2]
    cluster.network.drop_next("c2", silent, "recovery_add", count=1000)
    c2 = cluster.client("c2", request_timeout=0.5, add_entry_quorum_timeout=1.0)
    with pytest.raises(LedgerRecoveryError, match="did not reach every bookie"):
        c2.open_unbounded(lid)
    md = cluster.client("m").ledger_metadata(lid)
    assert (md.state, md.term) == (LedgerState.IN_RECOVERY, 2)
    cluster.network.heal()
    ul3 = cluster.client("c3").open_unbounded(lid)
    last = ul3.append(b"new")
    assert [e.data for e in ul3.read(0, last)] == [b"e0", b"e1", b"e2", b"new"]


def test_a_bookie_readied_late_at_the_end_of_a_takeover_keeps_what_it_holds_below_the_cut(
    cluster,
):
    """The end of a takeover readies the last fragment's members outside the no-op's
    write set above the no-op (TRIM ABOVE). One whose TRIM is lost is readied again after
    a pause, with the same cut: readied from the fragment's start instead, it dropped
    every entry it held of the older term, the ones this term had just written back to it
    too, acknowledged ones among them (found by the simulator: seeds 332 and 951 of
    ``unbounded-nojournal-races``)."""
    from embedlog.metadata.striping import write_set_bookies

    writer = cluster.client("w")
    ul = writer.create_unbounded(3, 2, 2)
    payloads = [b"e%d" % i for i in range(10)]
    assert [ul.append(p) for p in payloads] == list(range(10))
    lid, ensemble = ul.ledger_id, ul.metadata.last_fragment[1]
    (outside,) = set(ensemble) - set(write_set_bookies(10, ensemble, 2))  # the no-op's at 10
    held = {e for e in range(10) if outside in write_set_bookies(e, ensemble, 2)}
    assert {e: stored(cluster, outside, lid, e) for e in held} == {e: payloads[e] for e in held}
    taker = cluster.client("t", request_timeout=0.5)
    # Lost twice: the takeover's own retry (at the no-op) loses too, so the writer's
    # retry of the member is the one that readies it.
    cluster.network.drop_next("t", outside, "trim", count=2)
    ul2 = taker.open_unbounded(lid)
    assert ul2.term == 2 and ul2.metadata.last_fragment[1] == ensemble  # readied, not replaced
    assert {e: stored(cluster, outside, lid, e) for e in held} == {e: payloads[e] for e in held}
    r = cluster.client("r").open_unbounded(lid, takeover=False)
    assert [e.data for e in r.read(0, 9)] == payloads


def test_a_takeover_never_readies_a_bookie_the_stored_metadata_lists_in_its_last_fragment(
    make_cluster, monkeypatch
):
    """A takeover keeps its replacements in memory until its end stores them. Here it
    replaces b by the spare, then a fails too, and b is the only writable bookie left
    outside its ensemble. Picked and readied (TRIM ABOVE), b dropped every entry it
    acknowledged; the takeover then failed, and the metadata still listed b for them: the
    next takeover took b's "no such entry" for an entry never acknowledged (found by the
    simulator: seed 3105 of ``unbounded-nojournal``)."""
    import asyncio

    from embedlog.metadata.striping import write_set_bookies
    from embedlog.unbounded import writer as term_writer
    from embedlog.unbounded.writer import TermWriter

    # As once b failed more than SUSPECT_SECONDS ago (the seed's case): no longer avoided.
    monkeypatch.setattr(term_writer, "SUSPECT_SECONDS", 0.0)
    cluster = make_cluster(4)
    ul = cluster.client("w").create_unbounded(3, 2, 2)
    payloads = [b"e%d" % i for i in range(10)]
    assert [ul.append(p) for p in payloads] == list(range(10))
    lid, ensemble = ul.ledger_id, ul.metadata.last_fragment[1]
    a, b, _c = ensemble
    held = {e: payloads[e] for e in range(10) if b in write_set_bookies(e, ensemble, 2)}
    assert {e: stored(cluster, b, lid, e) for e in held} == held
    taker = cluster.client("t")

    async def replace(writer: TermWriter, bookie: str) -> tuple[str, ...]:
        writer._bookie_failed(bookie)
        while writer._changing is not None:
            await asyncio.sleep(0.01)
        return writer.md.last_fragment[1]

    async def takeover_that_loses_two_bookies_and_fails() -> tuple[tuple[str, ...], ...]:
        ctx = taker.ctx
        md = await ctx.meta(ctx.metadata.read_ledger, lid)
        md = await ctx.meta(
            ctx.metadata.write_ledger,
            md.evolve(term=md.term + 1, state=LedgerState.IN_RECOVERY),
        )
        # As recover_term builds it, writing back from the start (no LAFR known).
        writer = TermWriter(
            ctx, md, b"", term=md.term, lac=-1, recovery=True, guaranteed_write_quorum=True
        )
        try:
            return await replace(writer, b), await replace(writer, a)
        finally:
            writer.stop()

    after_b, after_a = taker.runtime.run(takeover_that_loses_two_bookies_and_fails())
    assert b not in after_b  # the spare took its slot, in the takeover's memory only
    assert b not in after_a  # no replacement for a then: retried, not b
    assert cluster.client("m").ledger_metadata(lid).last_fragment[1] == ensemble
    # b answered "no such entry" for each of them, though it acknowledged them.
    assert {e: stored(cluster, b, lid, e) for e in held} == held
    ul2 = cluster.client("c2").open_unbounded(lid)
    assert [e.data for e in ul2.read(0, 9)] == payloads


def test_a_takeover_leaves_its_end_with_the_bookies_as_their_lafr(cluster, caplog):
    """A takeover tells the last fragment's bookies its end (the no-op) as LAC and LAFR
    once its term is OPEN (takeover.announce_end), so the next takeover reads forward
    from there. Before, a stream nobody wrote to between takeovers (one a bookie's repair
    takes over on every boot) was read and written back again from the deposed writer's
    last LAFR by every takeover."""
    ul = cluster.client("w").create_unbounded(3, 3, 2)
    for i in range(5):
        ul.append(b"x%d" % i)
    lid = ul.ledger_id
    t1 = cluster.client("t1").open_unbounded(lid)
    assert (t1.term, t1.last_add_confirmed) == (2, 5)  # the no-op at 5
    bookies = t1.metadata.last_fragment[1]
    wait_until(lambda: all(cluster.bookie(b).ledger_info(lid).lafr == 5 for b in bookies))
    assert all(cluster.bookie(b).ledger_info(lid).explicit_lac == 5 for b in bookies)
    with caplog.at_level(logging.INFO, logger="embedlog.unbounded.takeover"):
        t2 = cluster.client("t2").open_unbounded(lid)
    assert "term 3: LAFR 5, LAC 5, recovering from 6" in caplog.text
    assert t2.last_add_confirmed == 6
    assert [e.data for e in t2.read(0, 6)] == [b"x%d" % i for i in range(5)]
