"""Repair interrupted by crashes and clean stops resumes; randomized crash schedules.

The randomized test keeps to the failures BP-46 is designed for (one bookie at a
time loses what it had not flushed, or its whole disk), and checks after every
step what the protocol promises: every acknowledged entry stays readable and a
closed ledger's last entry covers every entry acknowledged to its writer.
"""

from __future__ import annotations

import random
from concurrent.futures import TimeoutError as FutureTimeout

import pytest

from embedlog.cluster_bookies import repair_client_name
from embedlog.errors import BKError

NO_FLUSH = 3600.0
UNSAFE = {"unsafe_skip_limbo": True, "unsafe_skip_fence_on_boot": True}


def _block_repair(cluster, bid):
    for peer in cluster.bookie_ids:
        if peer != bid:
            cluster.network.block(repair_client_name(bid), peer)


@pytest.mark.parametrize("second_stop", ["crash", "clean"])
def test_interrupted_repair_resumes(make_cluster, second_stop):
    cluster = make_cluster(
        3, journal_write_data=False, flush_interval=NO_FLUSH, repair_retry_interval=0.1
    )
    b1 = cluster.bookie_ids[0]
    wh = cluster.client("c1").create_ledger(3, 3, 2)
    data = [b"e%d" % i for i in range(20)]
    for d in data:
        wh.add(d)
    cluster.crash_bookie(b1)  # everything of b1's was unflushed: gone
    _block_repair(cluster, b1)
    cluster.start_bookie(b1)
    status = cluster.bookie(b1).status()
    assert status["repair"]["state"] in ("running", "waiting") and status["limbo_ledgers"] == 1

    if second_stop == "crash":
        cluster.crash_bookie(b1)
    else:
        cluster.stop_bookie(b1)
    cluster.network.heal()
    cluster.start_bookie(b1)
    status = cluster.wait_repaired(b1)
    # A clean stop is not suspicious, but the repair marker brings the repair back.
    assert bool(status["suspicious_boot"]) is (second_stop == "crash")
    assert status["repair"]["state"] == "done" and status["limbo_ledgers"] == 0
    md = cluster.metadata.read_ledger(wh.ledger_id)
    assert md.is_closed and md.last_entry_id == len(data) - 1
    assert [cluster.read_from_bookie(b1, wh.ledger_id, i) for i in range(20)] == data


def _check(cluster, acked, closed_by_writer):
    reader = cluster.client("checker")
    for lid, entries in acked.items():
        if not entries:
            continue
        md = cluster.metadata.read_ledger(lid)
        top = max(entries)
        if md.is_closed:
            assert md.last_entry_id >= top, f"ledger {lid} closed below acknowledged {top}"
            rh = reader.open_ledger(lid, recover=False)
        else:
            rh = reader.open_ledger(lid, recover=False)
            if rh.last_add_confirmed < top:
                continue  # still open: checked once recovered below
        got = {e.entry_id: e.data for e in rh.read(0, top)}
        for eid, payload in entries.items():
            assert got[eid] == payload, f"entry {lid}:{eid} lost or changed"
    for lid, last in closed_by_writer.items():
        assert cluster.metadata.read_ledger(lid).last_entry_id == last


@pytest.mark.parametrize("seed", range(8))
def test_random_crashes_without_the_journal_lose_nothing_acknowledged(make_cluster, seed):
    _run_schedule(make_cluster, seed)


def test_the_random_schedules_find_the_loss_when_the_protection_is_off(make_cluster):
    """Without fence-on-boot and limbo, some of the same schedules lose acknowledged data."""
    lost = 0
    for seed in range(12):
        try:
            _run_schedule(make_cluster, seed, **UNSAFE)
        except AssertionError:
            lost += 1
    assert lost > 0


def _run_schedule(make_cluster, seed, **unsafe):
    rng = random.Random(seed)
    cluster = make_cluster(
        4,
        journal_write_data=False,
        flush_interval=rng.choice([0.02, 0.3, NO_FLUSH]),
        repair_retry_interval=0.1,
        auto_fix_cookies=True,
        **unsafe,
    )
    try:
        client = cluster.client("w", request_timeout=1.0, add_entry_quorum_timeout=10.0)
        acked: dict[int, dict[int, bytes]] = {}
        writers = []
        closed_by_writer: dict[int, int] = {}
        for step in range(16):
            action = rng.choice(["add", "add", "add", "new", "crash", "wipe", "recover", "close"])
            if action == "new" or not writers:
                wh = client.create_ledger(3, rng.choice([2, 3]), 2)
                writers.append(wh)
                acked[wh.ledger_id] = {}
            if action == "add" and writers:
                wh = rng.choice(writers)
                futs = []
                for i in range(rng.randint(1, 30)):
                    payload = b"s%d-%d-%d" % (seed, step, i)
                    futs.append((payload, wh.add_async(payload)))
                for payload, fut in futs:
                    try:
                        acked[wh.ledger_id][fut.result(timeout=60)] = payload
                    except (BKError, FutureTimeout):
                        pass  # not acknowledged: no promise to keep
                if any(not f.done() or f.exception() for _, f in futs):
                    writers.remove(wh)
            elif action in ("crash", "wipe"):
                bid = rng.choice(cluster.running_bookies())
                cluster.crash_bookie(bid)
                if action == "wipe":
                    cluster.wipe_bookie(bid, rng.choice(["all", "ledgers", "index", "journal"]))
                cluster.start_bookie(bid)
                cluster.wait_repaired(bid)  # one failure at a time, as BP-46's model assumes
                writers = [
                    w for w in writers if not cluster.metadata.read_ledger(w.ledger_id).is_closed
                ]
            elif action == "recover" and acked:
                lid = rng.choice(sorted(acked))
                cluster.client("r").open_ledger(lid)
                writers = [w for w in writers if w.ledger_id != lid]
            elif action == "close" and writers:
                wh = writers.pop(rng.randrange(len(writers)))
                try:
                    wh.close()
                    closed_by_writer[wh.ledger_id] = wh.last_add_confirmed
                except BKError:
                    pass  # fenced by a repair: the recovery's end is checked instead
            _check(cluster, acked, closed_by_writer)
        for lid in acked:
            cluster.client("final").open_ledger(lid)  # recover whatever is still open
        _check(cluster, acked, closed_by_writer)
    finally:
        cluster.stop()  # twelve clusters in one test: free each one
