"""Randomized: adds interleaved with bookie crashes/restarts, blocked links and recovery.

After a final recovery, every acknowledged entry is readable with its payload
and the closed ledger's last entry is at least the highest acknowledged id.
"""

from __future__ import annotations

import concurrent.futures
import tempfile
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from embedlog import BKError, LocalCluster

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 30)),
        st.tuples(st.just("crash"), st.integers(0, 3)),
        st.tuples(st.just("restart"), st.integers(0, 3)),
        st.tuples(st.just("block"), st.integers(0, 3)),
        st.tuples(st.just("heal"), st.just(0)),
        st.tuples(st.just("pause"), st.just(0)),
    ),
    min_size=3,
    max_size=14,
)


def settle(futures, timeout=20.0):
    done, _ = concurrent.futures.wait(futures, timeout=timeout)
    acked = {}
    for f, payload in futures.items():
        if f in done and f.exception() is None:
            acked[f.result()] = payload
    return acked


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(ops=OPS, wq_aq=st.sampled_from([(3, 2), (3, 3), (2, 2)]))
def test_acknowledged_entries_survive_faults_and_recovery(ops, wq_aq):
    wq, aq = wq_aq
    with tempfile.TemporaryDirectory() as d, LocalCluster(4, data_dir=d) as cluster:
        writer = cluster.client("writer", request_timeout=0.3, add_entry_quorum_timeout=3.0)
        wh = writer.create_ledger(3, wq, aq)
        futures: dict[concurrent.futures.Future, bytes] = {}
        down: set[str] = set()
        blocked: set[str] = set()
        seq = 0
        for op, arg in ops:
            bid = cluster.bookie_ids[arg % 4]
            if op == "add":
                for _ in range(arg):
                    payload = b"p%d" % seq
                    seq += 1
                    futures[wh.add_async(payload)] = payload
            elif op == "crash" and bid not in down and len(down | blocked) < 1:
                cluster.crash_bookie(bid)
                down.add(bid)
            elif op == "restart" and bid in down:
                cluster.start_bookie(bid)
                down.discard(bid)
            elif op == "block" and not (down | blocked):
                cluster.network.block("writer", bid)
                blocked.add(bid)
            elif op == "heal":
                cluster.network.heal()
                blocked.clear()
            elif op == "pause":
                time.sleep(0.1)
        settle(futures, timeout=5.0)
        cluster.network.heal()
        for bid in down:
            cluster.start_bookie(bid)
        rh = cluster.client("recoverer", request_timeout=1.0).open_ledger(wh.ledger_id)
        acked = settle(futures)  # adds still in flight end now: fenced or acknowledged
        last = rh.last_add_confirmed
        if acked:
            assert last >= max(acked), f"closed at {last}, but {max(acked)} was acknowledged"
            entries = {e.entry_id: e.data for e in rh.read(0, max(acked))}
            for eid, payload in acked.items():
                assert entries[eid] == payload
        # Entries are written in order: whatever recovery kept is a prefix of what was sent.
        if last >= 0:
            sent = list(futures.values())
            assert [e.data for e in rh.read(0, last)] == sent[: last + 1]
        try:
            wh.close()
        except BKError:
            pass
