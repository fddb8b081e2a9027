"""Randomized runs: takeovers by three clients, appends, bookie crashes and restarts,
lost and blocked requests, trims and rollovers. Afterwards every acknowledged entry
still stored (not trimmed) reads back as written, and no two bookies of a write set
hold different payloads for an id (the model's NoLogDivergence, checked from outside)."""

from __future__ import annotations

import random

import pytest
from unbounded_helpers import replicas

from embedlog import BKError, InvalidTermError


@pytest.mark.parametrize(
    ("seed", "shape"),
    [(1, (3, 3, 2)), (7, (3, 3, 2)), (12, (3, 3, 2)), (3, (4, 3, 2)), (21, (4, 3, 2))],
)
def test_random_takeovers_faults_and_trims(make_cluster, seed, shape):
    rng = random.Random(seed)
    cluster = make_cluster(5)
    lid = (
        cluster.client("setup")
        .create_unbounded(*shape, fragment_max_entries=rng.choice([None, 7, 30]))
        .ledger_id
    )
    clients = [cluster.client(n, request_timeout=1.0) for n in "abc"]
    acked: dict[int, bytes] = {}
    for rnd in range(12):
        client = rng.choice(clients)
        try:
            ul = client.open_unbounded(lid)
        except BKError:
            continue  # e.g. too many bookies unknown right now: the next round retries
        datas = [b"%d-%d" % (rnd, i) for i in range(rng.randint(1, 60))]
        futures = [ul.append_async(d) for d in datas]
        act, bookie = rng.random(), rng.choice(cluster.bookie_ids)
        if act < 0.2:
            cluster.network.block(client.name, bookie)
        elif act < 0.3:
            cluster.crash_bookie(bookie)
        elif act < 0.4:
            kind = rng.choice(["add", "fence", "recovery_read", "recovery_add"])
            cluster.network.drop_next(client.name, bookie, kind, rng.randint(1, 5))
        for fut, data in zip(futures, datas, strict=True):
            try:
                eid = fut.result()
            except InvalidTermError:
                continue
            assert acked.setdefault(eid, data) == data, f"id {eid} acknowledged twice"
        cluster.network.heal()
        for b in cluster.bookie_ids:
            if b not in cluster.running_bookies():
                cluster.start_bookie(b)
        if acked and rng.random() < 0.3:
            ul.trim(rng.randint(0, max(acked)))
    closer = cluster.client("z").open_unbounded(lid)
    md = closer.metadata
    low, lac = md.fragments[0][0], closer.last_add_confirmed
    seen = {e.entry_id: e.data for e in closer.read(low, lac)} if lac >= low else {}
    for eid, data in acked.items():
        if eid >= low:
            assert seen.get(eid) == data, f"acknowledged entry {eid} lost"
    for eid in range(low, lac + 1):
        held = {v for v in replicas(cluster, md, eid).values() if v is not None}
        assert len(held) <= 1, f"entry {eid} diverged: {held}"
