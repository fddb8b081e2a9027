"""Decommissioning a bookie of an in-process cluster: closed, open and stream ledgers move
off it under live writers, nothing acknowledged is lost, and it is retired; refusals change
nothing; an open ledger whose writer has not moved yet is waited for, and a second run
finishes the work."""

from __future__ import annotations

import threading

import pytest
from auditor_helpers import set_rack

from embedlog import LocalCluster
from embedlog.auditor.checker import MetadataChecker
from embedlog.auditor.decommission import (
    Decommissioner,
    DecommissionRefusedError,
    decommission_cluster,
)
from embedlog.errors import CookieError
from embedlog.metadata.ledger_metadata import LedgerState
from embedlog.transport.base import Transport
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import AddFlags, OpCode, Response


def lists(cluster: LocalCluster, bookie: str) -> list[int]:
    meta = cluster.metadata
    return [lid for lid in meta.list_ledgers() if bookie in meta.read_ledger(lid).bookies()]


def on(cluster: LocalCluster, bookie: str, create):
    """A handle from ``create()`` whose first ensemble holds ``bookie`` (others are closed)."""
    while True:
        handle = create()
        if bookie in handle.metadata.ensembles[0]:
            return handle
        handle.close()


class Appender(threading.Thread):
    """Appends ``prefix-<n>`` until stopped; remembers every acknowledged entry."""

    def __init__(self, append, prefix: bytes) -> None:
        super().__init__(daemon=True)
        self.append, self.prefix = append, prefix
        self.acked: dict[int, bytes] = {}
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        n = 0
        try:
            while not self.stop.is_set():
                data = self.prefix + b"-%d" % n
                self.acked[self.append(data)] = data
                n += 1
        except BaseException as exc:  # the test asserts there is none
            self.error = exc

    def finish(self) -> dict[int, bytes]:
        self.stop.set()
        self.join()
        assert self.error is None, self.error
        return self.acked


def checker(cluster: LocalCluster) -> MetadataChecker:
    return MetadataChecker(cluster.metadata, cluster.transport, cluster.runtime, recheck_delay=0)


def test_closed_open_and_stream_ledgers_move_off_under_live_writers(make_cluster) -> None:
    cluster = make_cluster(5)
    client = cluster.client("app")
    closed = client.create_ledger(3, 2, 2)
    victim = closed.metadata.ensembles[0][0]
    closed_data = {closed.add(b"closed-%d" % i): b"closed-%d" % i for i in range(50)}
    closed.close()
    empty = on(cluster, victim, lambda: client.create_ledger(3, 2, 2))
    empty.close()  # no entries: its only fragment holds nothing
    bounded = on(cluster, victim, lambda: client.create_ledger(3, 2, 2))
    stream = on(cluster, victim, lambda: client.create_unbounded(3, 2, 2))
    before = {bounded.add(b"early-%d" % i): b"early-%d" % i for i in range(30)}
    stream_before = {stream.append(b"s-early-%d" % i): b"s-early-%d" % i for i in range(30)}
    assert set(lists(cluster, victim)) >= {closed.ledger_id, empty.ledger_id}
    assert {bounded.ledger_id, stream.ledger_id} <= set(lists(cluster, victim))

    cluster.stop_bookie(victim)
    writers = [Appender(bounded.add, b"late"), Appender(stream.append, b"s-late")]
    for w in writers:
        w.start()
    result = decommission_cluster(cluster, victim, wait_for_writers=60)
    late, stream_late = (w.finish() for w in writers)

    assert result.ok and result.failures == {}, result.failures
    assert lists(cluster, victim) == []
    moved = {closed.ledger_id, empty.ledger_id, bounded.ledger_id, stream.ledger_id}
    assert moved <= set(result.moved)
    assert result.entries_copied > 0
    assert cluster.metadata.read_cookie(victim) is None
    assert victim not in cluster.metadata.known_bookies()
    assert late and stream_late  # the writers kept appending throughout

    bounded.close()
    reader = cluster.client("reader")
    assert {e.entry_id: e.data for e in reader.open_ledger(closed.ledger_id).entries()} == (
        closed_data
    )
    assert {e.entry_id: e.data for e in reader.open_ledger(bounded.ledger_id).entries()} == (
        before | late
    )
    stream_all = stream_before | stream_late
    assert {e.entry_id: e.data for e in stream.read(0, max(stream_all))} == stream_all
    report = checker(cluster).run()
    assert report.ok, report.violations
    assert report.ledgers[stream.ledger_id].outcome == "checked"  # its sealed fragments were

    # Its disks are refused at the next boot: the bookie cannot rejoin by accident.
    with pytest.raises(CookieError, match="no cookie"):
        cluster.start_bookie(victim)


def test_too_few_bookies_left_is_refused_and_nothing_changes(make_cluster) -> None:
    cluster = make_cluster(3)
    wh = cluster.client("app").create_ledger(3, 2, 2)
    for i in range(10):
        wh.add(b"entry %d" % i)
    wh.close()
    cluster.stop_bookie("bookie-2")
    md = cluster.metadata.read_ledger(wh.ledger_id)
    cookie = cluster.metadata.read_cookie("bookie-2")

    with pytest.raises(DecommissionRefusedError) as refused:
        decommission_cluster(cluster, "bookie-2")

    message = str(refused.value)
    assert f"ledger {wh.ledger_id} (ensemble size 3" in message
    assert "no other writable bookie can take its place (2 remain: bookie-1, bookie-3)" in message
    assert message.endswith("nothing was changed: start another bookie first")
    assert "\n" not in message
    assert cluster.metadata.read_ledger(wh.ledger_id).version == md.version
    assert cluster.metadata.read_cookie("bookie-2") == cookie
    assert cluster.metadata.underreplicated() == {}


def test_a_running_bookie_is_refused(make_cluster) -> None:
    cluster = make_cluster(4)
    with pytest.raises(DecommissionRefusedError, match=r"bookie-1 is running \(registered "):
        decommission_cluster(cluster, "bookie-1")
    assert cluster.metadata.read_cookie("bookie-1") is not None


def test_an_unknown_bookie_is_refused(make_cluster) -> None:
    cluster = make_cluster(3)
    with pytest.raises(DecommissionRefusedError, match="bookie-9 is unknown to this cluster"):
        decommission_cluster(cluster, "bookie-9")


def test_an_idle_writer_is_waited_for_and_a_second_run_finishes(make_cluster) -> None:
    """The open last fragment is its writer's: the first run neither fences nor rewrites
    it, and says so; once the writer's next add moved it, a second run completes."""
    cluster = make_cluster(4)
    client = cluster.client("app")
    wh = client.create_ledger(3, 2, 2)
    victim = wh.metadata.ensembles[0][1]
    data = {wh.add(b"entry %d" % i): b"entry %d" % i for i in range(20)}
    cluster.stop_bookie(victim)
    before = cluster.metadata.read_ledger(wh.ledger_id)

    first = Decommissioner(
        cluster.metadata,
        cluster.transport,
        cluster.runtime,
        victim,
        wait_for_writers=0.3,
    ).run()

    assert not first.ok
    (problem,) = first.failures[wh.ledger_id]
    assert f"its writer has not moved its last fragment off {victim}" in problem
    assert f"`embedlog ledger recover {wh.ledger_id}` closes the ledger" in problem
    assert cluster.metadata.read_ledger(wh.ledger_id) == before  # untouched
    assert cluster.metadata.read_cookie(victim) is not None  # not retired

    data |= {wh.add(b"entry %d" % i): b"entry %d" % i for i in range(20, 25)}  # moves it
    second = decommission_cluster(cluster, victim, wait_for_writers=0.3)

    assert second.ok, second.failures
    assert second.entries_copied > 0  # the now sealed fragment's part
    assert lists(cluster, victim) == []
    wh.close()
    got = {e.entry_id: e.data for e in cluster.client("r").open_ledger(wh.ledger_id).entries()}
    assert got == data
    assert checker(cluster).run().ok


def test_entries_with_no_other_copy_keep_the_bookie(make_cluster) -> None:
    cluster = make_cluster(3)
    wh = on(cluster, "bookie-1", lambda: cluster.client("app").create_ledger(1, 1, 1))
    for i in range(5):
        wh.add(b"entry %d" % i)
    wh.close()
    cluster.stop_bookie("bookie-1")

    result = decommission_cluster(cluster, "bookie-1")

    assert not result.ok
    problems = "; ".join(result.failures[wh.ledger_id])
    assert "entries 0-4 have no copy on any other bookie" in problems
    assert cluster.metadata.read_ledger(wh.ledger_id).ensembles[0] == ["bookie-1"]
    assert cluster.metadata.read_cookie("bookie-1") is not None


class _DroppedCopies(Transport):
    """The cluster's transport, except that every copy (an ADD with the recovery flag) is
    answered EOK without reaching its bookie: a target that acknowledges and loses it."""

    def __init__(self, inner: Transport) -> None:
        self.inner, self.dropped = inner, 0

    async def request(self, src, bookie_id, req, timeout):
        if req.op == OpCode.ADD and req.flags & AddFlags.RECOVERY:
            self.dropped += 1
            return Response(req.op, req.txn, StatusCode.EOK, req.ledger_id, req.entry_id)
        return await self.inner.request(src, bookie_id, req, timeout)


def test_a_copy_that_does_not_verify_is_never_swapped_in(make_cluster) -> None:
    """Every add of the copy answered EOK, yet the replacement does not list the entries:
    the metadata keeps naming the decommissioned bookie, and it is not retired."""
    cluster = make_cluster(4)
    wh = cluster.client("app").create_ledger(3, 2, 2)
    for i in range(10):
        wh.add(b"entry %d" % i)
    wh.close()
    victim = wh.metadata.ensembles[0][0]
    cluster.stop_bookie(victim)
    before = cluster.metadata.read_ledger(wh.ledger_id)
    lying = _DroppedCopies(cluster.transport)

    result = Decommissioner(cluster.metadata, lying, cluster.runtime, victim).run()

    assert lying.dropped > 0
    assert not result.ok
    problems = result.failures[wh.ledger_id]
    assert f"{victim} not replaced: the copy on " in problems[0]
    assert "did not verify (it lacks " in problems[0]
    assert cluster.metadata.read_ledger(wh.ledger_id).fragments == before.fragments
    assert cluster.metadata.read_cookie(victim) is not None


def test_a_ledger_being_recovered_is_waited_for(make_cluster) -> None:
    """A recovery ends with a compare-and-swap at the version it wrote: nothing is swapped
    in between; once it closed the ledger, a second run moves it."""
    cluster = make_cluster(4)
    wh = cluster.client("app").create_ledger(3, 2, 2)
    for i in range(10):
        wh.add(b"entry %d" % i)
    victim = wh.metadata.ensembles[0][2]
    cluster.stop_bookie(victim)
    meta = cluster.metadata
    # What a recovering client writes first (its writer is gone: the handle is left alone).
    recovering = meta.write_ledger(
        meta.read_ledger(wh.ledger_id).evolve(state=LedgerState.IN_RECOVERY)
    )

    first = decommission_cluster(cluster, victim, wait_for_writers=0.2)

    assert not first.ok
    (problem,) = first.failures[wh.ledger_id]
    assert "it is being recovered (or taken over), and is moved once that ends" in problem
    assert meta.read_ledger(wh.ledger_id).version == recovering.version  # untouched

    meta.write_ledger(recovering.evolve(state=LedgerState.CLOSED, last_entry_id=9))
    second = decommission_cluster(cluster, victim, wait_for_writers=0.2)

    assert second.ok, second.failures
    assert lists(cluster, victim) == []
    got = [e.data for e in cluster.client("r").open_ledger(wh.ledger_id).entries()]
    assert got == [b"entry %d" % i for i in range(10)]


def test_replacements_keep_write_sets_across_racks(make_cluster) -> None:
    cluster = make_cluster(5)
    racks = {"bookie-1": "/r1", "bookie-2": "/r1", "bookie-3": "/r2", "bookie-4": "/r2"}
    for bid, rack in racks.items():
        set_rack(cluster, bid, rack)
    cluster.stop_bookie("bookie-5")  # not a candidate: the two racks are all there is
    victim = "bookie-3"
    client = cluster.client("app")
    ledgers = []
    while len(ledgers) < 5:  # ensembles of the victim and a /r1 bookie
        wh = client.create_ledger(2, 2, 2)
        for i in range(4):
            wh.add(b"entry %d" % i)
        wh.close()
        ensemble = wh.metadata.ensembles[0]
        if victim in ensemble and "bookie-4" not in ensemble:
            ledgers.append(wh.ledger_id)
        else:
            client.delete_ledger(wh.ledger_id)
    assert checker(cluster).run().ok  # every write set spans both racks
    cluster.stop_bookie(victim)

    result = decommission_cluster(cluster, victim)

    assert result.ok, result.failures
    for lid in ledgers:  # the other /r2 bookie took its place each time, never a /r1 one
        assert "bookie-4" in cluster.metadata.read_ledger(lid).ensembles[0]
    assert checker(cluster).run().ok
