"""The entries every side-by-side system writes, embedlog's pipelined adds and its
append -> follower measurement, shared by benchmarks/bench_latency.py,
bench_flush_stall.py and the embedlog peer (no psutil here: those benchmarks run
without the peers' requirements)."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

SIZE = 1024  # bytes per entry


def payload(seq: int) -> bytes:
    """SIZE bytes that start with their sequence number, so a follower can tell which
    write it got."""
    head = b"%012d:" % seq
    return head + b"x" * (SIZE - len(head))


def seq_of(data: bytes) -> int:
    return int(data[:12])


def add_pipelined(handle: Any, data: bytes, count: int, window: int) -> None:
    """``count`` ``add_async`` of ``data`` to a ledger ``handle``, at most ``window`` in
    flight, all waited for."""
    futures: deque[Any] = deque()
    for _ in range(count):
        futures.append(handle.add_async(data))
        if len(futures) >= window:
            futures.popleft().result()
    for f in futures:
        f.result()


def follow_latencies(cluster: Any, count: int, gap: float) -> list[float]:
    """Seconds from each of ``count`` appends (one every ``gap`` seconds) to a stream until
    a follower's tail, waiting before the first, yields it."""
    writer = cluster.client("tw").create_unbounded(3, 3, 2)
    follower = cluster.client("tf").open_unbounded(writer.ledger_id, takeover=False)
    tail = follower.tail(0, timeout=30)
    started: dict[int, float] = {}
    seen: dict[int, float] = {}

    def follow() -> None:
        for e in tail:
            seen[seq_of(e.data)] = time.perf_counter()
            if len(seen) == count:
                return

    t = threading.Thread(target=follow, daemon=True)
    t.start()
    time.sleep(0.2)  # the follower waits before the first append, as for the other systems
    for i in range(count):
        started[i] = time.perf_counter()
        writer.append(payload(i))
        time.sleep(gap)
    t.join(30)
    writer.close()
    follower.close()
    return [seen[i] - started[i] for i in started if i in seen]
