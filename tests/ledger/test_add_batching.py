"""Adds to one bookie share ADD_BATCH requests, except while network faults are set
(then every lost request is exactly one entry, as the fault-injection tests need)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections import Counter

import pytest

from embedlog.errors import LedgerFencedError, NoSuchEntryError
from embedlog.ledger.pending import PendingAdd
from embedlog.metadata.striping import write_set_bookies
from embedlog.wire.messages import OpCode


def spy_ops(cluster, monkeypatch) -> Counter:
    ops: Counter = Counter()
    transport = cluster.transport
    real = transport.send_nowait

    def send_nowait(src, bookie_id, req, timeout, then=None):
        ops[req.op] += 1
        return real(src, bookie_id, req, timeout, then)

    monkeypatch.setattr(transport, "send_nowait", send_nowait)
    return ops


def queue_at_once(cluster, wh, payloads) -> concurrent.futures.Future:
    """Queue the adds in one loop iteration, so that each bookie's share travels in one
    ADD_BATCH; the future gives their ids."""

    async def queue():
        return await asyncio.gather(*(wh.add_aio(p) for p in payloads))

    return cluster.runtime.submit(queue())


def test_pipelined_adds_travel_in_batches(cluster, monkeypatch):
    ops = spy_ops(cluster, monkeypatch)
    wh = cluster.client("c1").create_ledger(3, 3, 2)
    futures = [wh.add_async(b"e%d" % i) for i in range(600)]
    assert [f.result() for f in futures] == list(range(600))
    assert ops[OpCode.ADD_BATCH] > 0
    assert ops[OpCode.ADD_BATCH] + ops[OpCode.ADD] < 3 * 600  # fewer requests than copies
    wh.close()
    rh = cluster.client("reader").open_ledger(wh.ledger_id)
    assert [e.data for e in rh.read(0, 599)] == [b"e%d" % i for i in range(600)]
    for bookie in cluster.bookie_ids:  # every copy reached every bookie of the write set
        assert cluster.read_from_bookie(bookie, wh.ledger_id, 599) == b"e599"


def test_no_batches_while_faults_are_set(cluster, monkeypatch):
    ops = spy_ops(cluster, monkeypatch)
    cluster.network.block("someone-else", cluster.bookie_ids[0])  # any fault at all
    wh = cluster.client("c1").create_ledger(3, 3, 2)
    futures = [wh.add_async(b"e%d" % i) for i in range(300)]
    assert futures[-1].result() == 299
    assert ops[OpCode.ADD_BATCH] == 0 and ops[OpCode.ADD] >= 3 * 300  # resends may add more


def test_a_lost_add_is_one_entry_under_fault_injection(cluster):
    # drop_next("add") must lose one entry's copy, not a batch of them: the other entries
    # reach the bookie at once, the lost one only when the writer resends it.
    b1 = cluster.bookie_ids[0]
    c = cluster.client("c1", request_timeout=1.0)
    wh = c.create_ledger(3, 3, 3)  # AQ=3: every copy is needed
    cluster.network.drop_next("c1", b1, "add", 1)
    futures = [wh.add_async(b"e%d" % i) for i in range(50)]
    assert futures[-1].result(60) == 49
    assert cluster.read_from_bookie(b1, wh.ledger_id, 0) == b"e0"
    assert cluster.read_from_bookie(b1, wh.ledger_id, 49) == b"e49"


def test_striped_batches_reach_exactly_each_entry_s_write_set(make_cluster, monkeypatch):
    # E5 WQ3: each bookie's share of a run of adds is the entries whose write set holds
    # its slot; a wrong share would leave an entry short of copies or on a stranger.
    cluster = make_cluster(5)
    ops = spy_ops(cluster, monkeypatch)
    wh = cluster.client("c1").create_ledger(5, 3, 2)
    futures = [wh.add_async(b"e%d" % i) for i in range(300)]
    assert futures[-1].result(60) == 299
    wh.close()
    assert ops[OpCode.ADD_BATCH] > 0
    [(_, ensemble)] = wh.metadata.fragments
    for e in range(300):
        holders = set(write_set_bookies(e, ensemble, 3))
        for bookie in ensemble:
            if bookie in holders:
                assert cluster.read_from_bookie(bookie, wh.ledger_id, e) == b"e%d" % e
            else:
                with pytest.raises(NoSuchEntryError):
                    cluster.read_from_bookie(bookie, wh.ledger_id, e)


def test_an_entry_that_released_its_bytes_is_not_sent_again(cluster, monkeypatch):
    # The unbounded writer drops an acknowledged entry's bytes. If that entry was queued
    # for a resend meanwhile, sending it would put an empty frame in a batch: the bookie
    # would answer fewer verdicts than the batch has entries, and the writer would take
    # that as a failed bookie.
    ops = spy_ops(cluster, monkeypatch)
    wh = cluster.client("c1").create_ledger(3, 3, 2)
    wh.add(b"x")
    writer = wh._writer
    bookie = writer.md.last_fragment[1][0]

    async def queue_released() -> None:
        released = PendingAdd(0, b"", asyncio.get_running_loop().create_future(), 0)
        released.settled = True
        writer._outbox_for(bookie, 0).extend([released, released])
        writer._flush_outbox()

    before = sum(ops.values())
    cluster.runtime.run(queue_released())
    assert sum(ops.values()) == before  # nothing sent
    assert wh.add(b"y") == 1 and writer.error is None
    wh.close()


def test_a_batch_without_an_answer_is_unknown_for_every_entry_it_carries(make_cluster, monkeypatch):
    # The bookie holds a batch until its journal writes it (30 s here) and crashes first:
    # no verdict for any entry. Each must count as unknown there, so the writer replaces the
    # bookie and resends all of them (AQ=3: none is acknowledged without that copy).
    cluster = make_cluster(4)
    ops = spy_ops(cluster, monkeypatch)
    wh = cluster.client("c1").create_ledger(3, 3, 3)
    wh.add(b"e0")
    slow = wh.metadata.ensembles[0][0]
    cluster.stop_bookie(slow)
    cluster.start_bookie(slow, journal_max_group_wait=30.0)
    before = ops[OpCode.ADD_BATCH]
    ids = queue_at_once(cluster, wh, [b"e%d" % i for i in range(1, 51)])
    while len(cluster.bookie(slow).ledger_entries(wh.ledger_id)) < 51:
        time.sleep(0.01)  # the batch is stored, waiting for the journal
    assert ops[OpCode.ADD_BATCH] > before
    cluster.crash_bookie(slow)
    assert ids.result() == list(range(1, 51))
    md = wh.metadata
    assert slow not in md.last_fragment[1]
    wh.close()
    for bookie in md.last_fragment[1]:
        assert cluster.read_from_bookie(bookie, wh.ledger_id, 50) == b"e50"


def test_a_refused_batch_fails_each_entry_as_its_verdict_says(make_cluster, monkeypatch):
    # After a recovery elsewhere, every bookie answers the old writer's batches EFENCED for
    # each entry: the writer fails them as fenced, as it would fail one fenced add. (Taken
    # for a failed bookie instead, the batch would start an ensemble change onto the spare.)
    cluster = make_cluster(4)
    ops = spy_ops(cluster, monkeypatch)
    wh = cluster.client("c1").create_ledger(3, 3, 2)
    wh.add(b"e0")
    assert cluster.client("c2").open_ledger(wh.ledger_id).last_add_confirmed == 0
    before = ops[OpCode.ADD_BATCH]
    ids = queue_at_once(cluster, wh, [b"e%d" % i for i in range(1, 51)])
    with pytest.raises(LedgerFencedError):
        ids.result()
    assert ops[OpCode.ADD_BATCH] > before
    assert len(wh.metadata.fragments) == 1


def test_a_resend_queued_beside_the_first_send_is_sent_once(make_cluster):
    """A retry that queues an entry for a bookie in the loop iteration that also sends it
    the first time must not put it twice into one ADD_BATCH: the bookie refuses such a
    batch, and the writer would take a healthy bookie for a failed one."""
    cluster = make_cluster(4)
    wh = cluster.client("c1").create_ledger(3, 3, 2)
    writer = wh._writer
    ensemble = wh.metadata.last_fragment[1]

    async def add_and_resend() -> int:
        future = writer.add(b"x")
        p = writer.pending[-1]
        # Runs after the writer's own send of this iteration, before its outbox flush.
        asyncio.get_running_loop().call_soon(writer._send, p, 0, ensemble[0])
        return await future

    assert cluster.runtime.run(add_and_resend()) == 0
    assert wh.add(b"y") == 1  # the writer still has every bookie
    assert wh.metadata.fragments == ((0, ensemble),)
    assert cluster.read_from_bookie(ensemble[0], wh.ledger_id, 0) == b"x"
