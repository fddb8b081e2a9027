"""LocalCluster.pause_bookie / resume_bookie: a bookie that stops answering and loses nothing."""

from __future__ import annotations

import time

import pytest


def _wait_until(predicate, what: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.01)


@pytest.mark.parametrize("transport", ["inprocess", "tcp"])
def test_a_paused_bookie_holds_requests_and_serves_them_in_order_on_resume(make_cluster, transport):
    cluster = make_cluster(3, transport=transport)
    client = cluster.client("app", request_timeout=120.0)
    wh = client.create_ledger(3, 3, 3)  # every add needs all three: the paused one too
    assert wh.add(b"e0") == 0
    paused = cluster.bookie_ids[1]
    cluster.pause_bookie(paused)
    assert cluster.paused_bookies() == [paused]
    futures = [wh.add_async(b"e%d" % i) for i in range(1, 6)]
    gate = cluster.bookie(paused).pause_gate
    _wait_until(lambda: gate.held > 0, "the paused bookie to hold a request")
    time.sleep(0.2)  # the other two bookies have answered by now; the adds still wait
    assert not any(f.done() for f in futures)
    assert gate.held >= 1  # the adds (in one batch or several) wait at the paused bookie

    cluster.resume_bookie(paused)
    assert [f.result(timeout=60) for f in futures] == [1, 2, 3, 4, 5]
    assert cluster.paused_bookies() == []
    for eid in range(6):
        assert cluster.read_from_bookie(paused, wh.ledger_id, eid) == b"e%d" % eid
    wh.close()


def test_a_writer_moves_past_a_paused_bookie_and_the_bookie_keeps_what_it_had(make_cluster):
    cluster = make_cluster(4)
    client = cluster.client("app", request_timeout=0.3)
    wh = client.create_ledger(3, 3, 2)
    assert wh.add(b"before") == 0
    paused = client.ledger_metadata(wh.ledger_id).ensembles[0][0]
    cluster.pause_bookie(paused)
    for i in range(1, 20):
        assert wh.add(b"during %d" % i) == i  # the two others acknowledge
        if i == 5:
            time.sleep(1.0)  # the paused bookie's requests time out: an ensemble change
    wh.close()
    md = client.ledger_metadata(wh.ledger_id)
    assert paused not in md.ensembles[max(md.ensembles)]  # replaced after its timeouts
    cluster.resume_bookie(paused)
    assert cluster.read_from_bookie(paused, wh.ledger_id, 0) == b"before"
    entries = cluster.client("reader").open_ledger(wh.ledger_id).read(0, 19)
    assert [e.data for e in entries] == [b"before"] + [b"during %d" % i for i in range(1, 20)]


@pytest.mark.parametrize("how", ["crash", "stop"])
def test_a_paused_bookie_that_goes_away_drops_what_it_held(make_cluster, how):
    cluster = make_cluster(4)
    client = cluster.client("app", request_timeout=120.0)
    wh = client.create_ledger(3, 3, 3)
    wh.add(b"e0")
    paused = client.ledger_metadata(wh.ledger_id).ensembles[0][2]
    cluster.pause_bookie(paused)
    future = wh.add_async(b"e1")
    gate = cluster.bookie(paused).pause_gate
    _wait_until(lambda: gate.held > 0, "the paused bookie to hold the add")
    # The sender learns the bookie went away (not a timeout two minutes later) and the
    # writer replaces it with the fourth bookie.
    (cluster.crash_bookie if how == "crash" else cluster.stop_bookie)(paused)
    assert future.result(timeout=60) == 1
    assert gate.held == 0
    cluster.start_bookie(paused)
    assert cluster.paused_bookies() == []  # a new boot is not paused


def test_pausing_a_bookie_that_is_not_running_is_an_error(make_cluster):
    cluster = make_cluster(3)
    bid = cluster.bookie_ids[0]
    cluster.stop_bookie(bid)
    with pytest.raises(RuntimeError, match="not running"):
        cluster.pause_bookie(bid)
    with pytest.raises(KeyError, match="unknown bookie"):
        cluster.pause_bookie("bookie-9")
    cluster.resume_bookie(cluster.bookie_ids[1])  # not paused: nothing to do
