"""embedlog: three bookies, E3 WQ3 AQ2, journal on, 1 KiB entries; in the benchmark's
process (``LocalCluster``) or each bookie in a process of its own
(``LocalCluster(processes=True)``, ``embedlog bookie run``, on a real ZooKeeper)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from common import Figures, Load, payload, pipelined
from follow import add_pipelined, follow_latencies

from embedlog import LocalCluster
from embedlog.metadata.zkserver import running_zookeeper


def measure(directory: Path, load: Load, *, processes: bool, **config: Any) -> Figures:
    """``config``: bookie settings (e.g. ``journal_max_group_wait``)."""
    if not processes:
        return _measure(directory, load, config)
    with running_zookeeper() as zk:
        return _measure(directory, load, {"processes": True, "metadata_uri": zk.uri(), **config})


def _measure(directory: Path, load: Load, kw: dict[str, Any]) -> Figures:
    fig = Figures()
    with LocalCluster(3, data_dir=directory, **kw) as cluster:
        wh = cluster.client("bench").create_ledger(3, 3, 2)
        for i in range(200):  # warm-up: connections, caches
            wh.add(payload(i))
        data = payload(0)
        # In-process only: how many entry copies each journal fsync carried.
        journals = (
            [] if kw.get("processes") else [cluster.bookie(b).journal for b in cluster.bookie_ids]
        )
        groups_before = sum(j.batches for j in journals if j is not None)
        with pipelined(fig, load.entries):
            add_pipelined(wh, data, load.entries, load.window)
        groups = sum(j.batches for j in journals if j is not None) - groups_before
        if groups:
            fig.note = f"journal groups of {3 * load.entries / groups:.0f} entry copies"
        # Each blocking add is paired with a write+fsync of 1 KiB on the same disk just
        # before it: issue #29's bound compares the two, and both drift with the VM.
        probe = os.open(directory / "fsync-probe.bin", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            for _ in range(load.blocking):
                t0 = time.perf_counter()
                os.write(probe, data)
                os.fsync(probe)
                t1 = time.perf_counter()
                wh.add(data)
                fig.fsync.append(t1 - t0)
                fig.blocking.append(time.perf_counter() - t1)
        finally:
            os.close(probe)
        wh.close()
        fig.follow = _follow(cluster, load)
    return fig


def _follow(cluster: LocalCluster, load: Load) -> list[float]:
    return follow_latencies(cluster, load.follow, load.gap)
