"""PySyncObj: three Raft nodes in the benchmark's process (each with its own thread, as a
PySyncObj application runs them), TCP on 127.0.0.1, a replicated append per entry, each
node with a journal file. PySyncObj's journal is a memory-mapped file it never fsyncs
(msync only when the node is destroyed): its acknowledgements are not durable on disk,
unlike embedlog's, JetStream's with ``sync_interval: always`` and etcd's."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from common import Figures, Load, free_ports, payload, pipelined, seq_of, wait_until
from pysyncobj import SyncObj, SyncObjConf, replicated


class AppendLog(SyncObj):  # type: ignore[misc]
    def __init__(self, addr: str, partners: list[str], conf: SyncObjConf) -> None:
        super().__init__(addr, partners, conf)
        self.count = 0
        self.timing = False
        self.applied: dict[int, float] = {}

    @replicated  # type: ignore[misc]
    def append(self, data: bytes) -> int:
        self.count += 1
        if self.timing:
            self.applied[seq_of(data)] = time.perf_counter()
        return self.count


def measure(directory: Path, load: Load) -> Figures:
    addrs = [f"127.0.0.1:{p}" for p in free_ports(3)]
    nodes = []
    for i, addr in enumerate(addrs):
        conf = SyncObjConf(
            journalFile=str(directory / f"node{i}.journal"),
            appendEntriesUseBatch=True,
            dynamicMembershipChange=False,
        )
        nodes.append(AppendLog(addr, [a for a in addrs if a != addr], conf))
    try:
        wait_until(lambda: all(n._getLeader() is not None for n in nodes), 30, "a Raft leader")
        leader = next(n for n in nodes if n._getLeader() == n.selfNode)
        follower = next(n for n in nodes if n is not leader)
        return _measure(leader, follower, load)
    finally:
        for n in nodes:
            n.destroy()


# A blocking append takes ~100 ms here (PySyncObj's 50 ms tick, twice): fewer samples.
SLOW_SAMPLES = 100


def _measure(leader: AppendLog, follower: AppendLog, load: Load) -> Figures:
    fig = Figures(note=f"{SLOW_SAMPLES} blocking and follower samples")
    load = Load(
        load.entries,
        load.window,
        min(load.blocking, SLOW_SAMPLES),
        min(load.follow, SLOW_SAMPLES),
        load.gap,
    )
    data = payload(0)
    for _ in range(200):
        leader.append(data, sync=True, timeout=10)
    room = threading.Semaphore(load.window)
    finished = threading.Event()
    done = 0
    failures: list[Any] = []

    def acked(_result: object, error: object) -> None:
        nonlocal done
        if error:  # FAIL_REASON.SUCCESS is 0
            failures.append(error)
        done += 1
        room.release()
        if done == load.entries:
            finished.set()

    with pipelined(fig, load.entries):
        for _ in range(load.entries):
            room.acquire()
            leader.append(data, callback=acked)
        finished.wait(120)
    if failures or done != load.entries:
        raise RuntimeError(f"PySyncObj failed {len(failures)} appends: {failures[:3]}")
    for _ in range(load.blocking):
        t0 = time.perf_counter()
        leader.append(data, sync=True, timeout=10)
        fig.blocking.append(time.perf_counter() - t0)
    follower.timing = True
    started: dict[int, float] = {}
    for i in range(load.follow):
        started[i] = time.perf_counter()
        leader.append(payload(i), sync=True, timeout=10)
        time.sleep(load.gap)
    wait_until(lambda: len(follower.applied) >= load.follow, 30, "the follower's last entry")
    fig.follow = [follower.applied[i] - started[i] for i in started if i in follower.applied]
    return fig
