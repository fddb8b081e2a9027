"""Issue #29's figures in one run: what one blocking add and one follower wait cost.

Three in-process bookies, journal on, E3 WQ3 AQ2, 1 KiB entries. Each round, in a fresh
process and a fresh cluster:

* one blocking ``add`` at a time, each paired with a write+fsync of 1 KiB on the same
  disk just before it (the least an acknowledged add can cost): p50 and p99 of both;
* the same blocking adds unpaired, for the CPU of the whole process per add
  (``time.process_time``) and of each thread (``/proc/self/task``): the caller, the
  runtime's loop, the three journals;
* the floor under them: three threads appending 1 KiB durably (as three journals do for
  one add, with nothing else around), released together: the time until two are done
  and the three threads' CPU per round;
* append -> follower: a writer appends every 5 ms, a follower's ``tail()`` yields each
  entry; from the append call to the follower having it (once the bookies have flushed
  what the phases before wrote);
* a freshly started tail: from ``tail()`` on a new handle to its first entry (already
  confirmed), beside one LAC read's round trip and one entry read's;
* pipelined ``add_async`` (window 1,000): entries/s, CPU per entry of the process, of
  the loop thread and of the caller.

``--compare REV`` runs every round also on the tree of another commit (``git archive``
into a temporary directory), alternating round by round, so both see the same drift of
the machine. Reported: medians over rounds, the range, and the load average.

Run: python benchmarks/bench_latency.py --rounds 5 --compare HEAD~1 [--no-worktree]
     python -m pytest benchmarks/bench_latency.py -s (one round, this tree)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "peers"))
from follow import add_pipelined, follow_latencies, payload  # noqa: E402  (the peers' entries and follower)

sys.path.insert(0, str(HERE))
from rounds import alternate  # noqa: E402

BLOCKING = 400
FOLLOW = 300
GAP = 0.005
PIPELINED = 20_000
WINDOW = 1_000


def pct(values: list[float], q: float) -> float:
    """The q-quantile in milliseconds."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000


def thread_cpu() -> dict[int, float]:
    """CPU seconds of each thread of this process, by native id (the scheduler's
    nanosecond count, not the 10 ms ticks of ``stat``: a few hundred adds are measurable)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                out[int(tid)] = int(f.read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            continue
    return out


def by_role(before: dict[int, float], after: dict[int, float]) -> dict[str, float]:
    """CPU seconds between two ``thread_cpu`` readings, summed by the thread's role."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    roles: dict[str, float] = {}
    for tid, cpu in after.items():
        name = names.get(tid, "")
        role = (
            "caller"
            if tid == threading.main_thread().native_id
            else "loop"
            if name.endswith("-loop")
            else "journals"
            if "journal" in name
            else "other"
        )
        roles[role] = roles.get(role, 0.0) + cpu - before.get(tid, 0.0)
    return roles


def one_round(directory: Path) -> dict[str, float]:
    from embedlog import LocalCluster

    r: dict[str, float] = {}
    data = payload(0)
    with LocalCluster(3, data_dir=directory / "cluster") as cluster:
        wh = cluster.client("bench").create_ledger(3, 3, 2)
        for _ in range(200):  # warm-up: caches, the journal threads
            wh.add(data)
        fsyncs, adds = [], []
        probe = os.open(directory / "fsync-probe.bin", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            for _ in range(BLOCKING):
                t0 = time.perf_counter()
                os.write(probe, data)
                os.fsync(probe)
                t1 = time.perf_counter()
                wh.add(data)
                adds.append(time.perf_counter() - t1)
                fsyncs.append(t1 - t0)
        finally:
            os.close(probe)
        r["fsync_p50"], r["fsync_p99"] = pct(fsyncs, 0.5), pct(fsyncs, 0.99)
        r["add_p50"], r["add_p99"] = pct(adds, 0.5), pct(adds, 0.99)
        threads0, cpu0 = thread_cpu(), time.process_time()
        for _ in range(BLOCKING):
            wh.add(data)
        r["add_cpu_us"] = (time.process_time() - cpu0) / BLOCKING * 1e6
        for role, cpu in by_role(threads0, thread_cpu()).items():
            r[f"add_cpu_us_{role}"] = cpu / BLOCKING * 1e6
        r.update(_loop_work(wh, data))
        r.update(_durable_floor(directory, data))

        threads0, cpu0 = thread_cpu(), time.process_time()
        start = time.perf_counter()
        add_pipelined(wh, data, PIPELINED, WINDOW)
        r["pipelined_per_s"] = PIPELINED / (time.perf_counter() - start)
        r["pipelined_cpu_us"] = (time.process_time() - cpu0) / PIPELINED * 1e6
        for role, cpu in by_role(threads0, thread_cpu()).items():
            r[f"pipelined_cpu_us_{role}"] = cpu / PIPELINED * 1e6
        wh.close()

        # The follower is measured in the steady state the issue names (a writer every
        # 5 ms), not behind the flush of the pipelined burst above: that flush (20,000
        # entries, mostly Python that holds the GIL) would stall the loop for its p99.
        for bid in cluster.bookie_ids:
            cluster.runtime.run(cluster.bookie(bid).flush())
        follow = _follower(cluster)
        r["follow_p50"], r["follow_p99"] = pct(follow, 0.5), pct(follow, 0.99)
        r.update(_fresh_tail(cluster))
    return r


def _loop_work(wh: Any, data: bytes) -> dict[str, float]:
    """Per blocking add, what the runtime's loop does: iterations, callbacks run and
    ``recv`` calls on its self-pipe (each one lets go of the GIL). Counted by wrapping the
    loop's own methods in this round's process only."""
    import asyncio.events

    runtime = wh._runtime  # the writer's runtime: its loop serves the bookies too
    loop = runtime.loop
    counts = {"iterations": 0, "callbacks": 0, "recvs": 0}
    run_once, handle_run, ssock = loop._run_once, asyncio.events.Handle._run, loop._ssock

    def counted_run_once() -> None:
        counts["iterations"] += 1
        run_once()

    def counted_run(handle: Any) -> None:
        counts["callbacks"] += 1
        handle_run(handle)

    class CountedSocket:
        def recv(self, n: int) -> bytes:
            counts["recvs"] += 1
            return bytes(ssock.recv(n))

        def __getattr__(self, name: str) -> Any:
            return getattr(ssock, name)

    def install(on: bool) -> None:
        loop._run_once = counted_run_once if on else run_once
        loop._ssock = CountedSocket() if on else ssock

    asyncio.events.Handle._run = counted_run  # type: ignore[method-assign, assignment]
    runtime.call(install, True)
    for key in counts:
        counts[key] = 0
    for _ in range(BLOCKING):
        wh.add(data)
    runtime.call(install, False)
    asyncio.events.Handle._run = handle_run  # type: ignore[method-assign]
    return {f"loop_{key}": n / BLOCKING for key, n in counts.items()}


def _durable_floor(directory: Path, data: bytes) -> dict[str, float]:
    """The floor under a lone add: what its three journals' durable writes cost with no
    protocol around them. Three threads, each appending ``data`` durably to a file of
    its own on the same disk (one ``pwritev`` with ``RWF_DSYNC``, as a journal's group;
    write + fdatasync where the flag is missing), released together each round: the
    time until the second of them is done (what an ack quorum of 2 waits for at least)
    and the CPU of the three threads per round."""
    flag = getattr(os, "RWF_DSYNC", 0)
    fds = [
        os.open(directory / f"floor-{i}.bin", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        for i in range(3)
    ]
    start, end, leave = threading.Barrier(4), threading.Barrier(4), threading.Barrier(4)
    done: list[list[float]] = [[] for _ in fds]
    ids: list[int] = []

    def writer(i: int) -> None:
        ids.append(threading.get_native_id())
        for _ in range(BLOCKING):
            start.wait()
            if flag:
                os.pwritev(fds[i], [data], -1, flag)
            else:
                os.write(fds[i], data)
                os.fdatasync(fds[i])
            done[i].append(time.perf_counter())
            end.wait()
        leave.wait()  # alive until their CPU is read

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    second: list[float] = []
    cpu0: dict[int, float] = {}
    try:
        for n in range(BLOCKING):
            if n == 0:
                cpu0 = thread_cpu()
            t0 = time.perf_counter()
            start.wait()
            end.wait()
            second.append(sorted(d[n] for d in done)[1] - t0)
        cpu1 = thread_cpu()
        leave.wait()
    finally:
        for t in threads:
            t.join()
        for fd in fds:
            os.close(fd)
    cpu = sum(cpu1.get(t, 0.0) - cpu0.get(t, 0.0) for t in ids)
    return {"floor_second_p50": pct(second, 0.5), "floor_cpu_us": cpu / BLOCKING * 1e6}


def _follower(cluster: Any) -> list[float]:
    return follow_latencies(cluster, FOLLOW, GAP)


def _fresh_tail(cluster: Any, samples: int = 30) -> dict[str, float]:
    """A new handle's tail from the last confirmed entry, beside one round trip to the
    bookies (a READ_LAC to each, answered at once)."""
    from embedlog.ledger.reader import read_lac

    writer = cluster.client("fw").create_unbounded(3, 3, 2)
    for i in range(10):
        writer.append(payload(i))
    time.sleep(0.05)  # the prompt LAC has reached the bookies: entry 9 is confirmed
    client = cluster.client("ff")
    md = client.ledger_metadata(writer.ledger_id)
    first, trips = [], []
    for _ in range(samples):
        ul = client.open_unbounded(writer.ledger_id, takeover=False)
        t0 = time.perf_counter()
        tail = ul.tail(9, timeout=30)
        e = next(tail)
        first.append(time.perf_counter() - t0)
        assert e.entry_id == 9
        tail.close()
        ul.close()
        t0 = time.perf_counter()
        client.runtime.run(read_lac(client.ctx, md))
        trips.append(time.perf_counter() - t0)
    writer.close()
    return {"fresh_tail_p50": pct(first, 0.5), "lac_read_p50": pct(trips, 0.5)}


# -- rounds in processes of their own, alternating between trees -----------------------


LINES: list[tuple[str, str, Callable[[dict[str, float]], float]]] = [
    ("write+fsync 1 KiB, p50 / p99 ms", "{:.3f} / {:.2f}", lambda r: r["fsync_p50"]),
    ("blocking add, p50 / p99 ms", "{:.3f} / {:.2f}", lambda r: r["add_p50"]),
    ("blocking add / fsync, p50", "{:.1f}x", lambda r: r["add_p50"] / r["fsync_p50"]),
    ("blocking add / fsync, p99", "{:.1f}x", lambda r: r["add_p99"] / r["fsync_p99"]),
    ("floor: 2nd of 3 durable writes done, p50 ms", "{:.3f}", lambda r: r["floor_second_p50"]),
    ("blocking add / floor, p50", "{:.1f}x", lambda r: r["add_p50"] / r["floor_second_p50"]),
    ("CPU per blocking add, µs (process)", "{:.0f}", lambda r: r["add_cpu_us"]),
    ("floor: CPU of 3 durable writes, µs", "{:.0f}", lambda r: r["floor_cpu_us"]),
    ("  of it the loop thread", "{:.0f}", lambda r: r.get("add_cpu_us_loop", 0.0)),
    ("  the three journal threads", "{:.0f}", lambda r: r.get("add_cpu_us_journals", 0.0)),
    ("  the caller (add)", "{:.0f}", lambda r: r.get("add_cpu_us_caller", 0.0)),
    ("  loop iterations per add", "{:.2f}", lambda r: r.get("loop_iterations", 0.0)),
    ("  loop callbacks per add", "{:.2f}", lambda r: r.get("loop_callbacks", 0.0)),
    ("  self-pipe recv calls per add", "{:.2f}", lambda r: r.get("loop_recvs", 0.0)),
    ("append -> follower, p50 ms", "{:.2f}", lambda r: r["follow_p50"]),
    ("append -> follower, p99 ms", "{:.2f}", lambda r: r["follow_p99"]),
    ("fresh tail's first entry, p50 ms", "{:.2f}", lambda r: r["fresh_tail_p50"]),
    ("  one LAC read's round trip, p50 ms", "{:.2f}", lambda r: r["lac_read_p50"]),
    ("pipelined add_async, entries/s", "{:,.0f}", lambda r: r["pipelined_per_s"]),
    ("CPU per pipelined entry, µs (process)", "{:.1f}", lambda r: r["pipelined_cpu_us"]),
    ("  of it the loop", "{:.1f}", lambda r: r.get("pipelined_cpu_us_loop", 0.0)),
    ("  the caller (add_async)", "{:.1f}", lambda r: r.get("pipelined_cpu_us_caller", 0.0)),
]
PAIRS = {  # lines that show a second figure after the first
    "write+fsync 1 KiB, p50 / p99 ms": lambda r: r["fsync_p99"],
    "blocking add, p50 / p99 ms": lambda r: r["add_p99"],
}


def summary(rounds: list[dict[str, float]]) -> dict[str, str]:
    out = {}
    for label, fmt, fig in LINES:
        values = [fig(r) for r in rounds]
        med = statistics.median(values)
        second = PAIRS.get(label)
        if second is not None:
            text = fmt.format(med, statistics.median(second(r) for r in rounds))
        else:
            text = fmt.format(med)
        if len(values) > 1 and second is None:
            text += f" ({fmt.format(min(values))}-{fmt.format(max(values))})"
        out[label] = text
    return out


def table(columns: dict[str, list[dict[str, float]]]) -> str:
    sums = {name: summary(rounds) for name, rounds in columns.items()}
    rows = ["| | " + " | ".join(sums) + " |", "|---|" + "---|" * len(sums)]
    for label, _fmt, _fig in LINES:
        rows.append(f"| {label} | " + " | ".join(s[label] for s in sums.values()) + " |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--compare", metavar="REV", nargs="+", default=[], help="also run these commits' trees"
    )
    parser.add_argument(
        "--no-worktree", action="store_true", help="only the --compare commits, not the work tree"
    )
    parser.add_argument("--one-round", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_round:
        print(json.dumps(one_round(Path(args.one_round))))
        return
    columns, load = alternate(
        Path(__file__).resolve(), args.compare, args.rounds, worktree=not args.no_worktree
    )
    print(table(columns))
    print(f"\n{args.rounds} rounds; load average (1 min) {min(load):.1f}-{max(load):.1f}")


def test_latency(benchmark: Any, tmp_path: Path) -> None:
    sys.path.insert(0, str(HERE))
    from baseline import measure_once

    result = measure_once(
        benchmark, one_round, tmp_path, lambda r: "\n" + table({"this tree": [r]})
    )
    assert result["add_p50"] > 0 and result["follow_p50"] > 0


if __name__ == "__main__":
    main()
