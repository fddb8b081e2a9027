"""``embedlog bookie decommission`` against bookie processes and ZooKeeper: a writer keeps
appending to a ledger and to a stream on the bookie while it is decommissioned; the command
is interrupted (SIGINT, then SIGKILL) midway and run again until it completes; nothing
acknowledged is lost and the auditor then finds nothing under-replicated. A running
bookie, and a cluster with too few bookies left, are refused, changing nothing."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

from procs import Procs, finish

from embedlog import LocalCluster

LEDGERS = 12
ENTRIES = 1500


class Appender(threading.Thread):
    """Appends until stopped; remembers every acknowledged entry."""

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
                time.sleep(0.002)  # a steady stream, not a flood on two shared cores
        except BaseException as exc:  # the test asserts there is none
            self.error = exc

    def finish(self) -> dict[int, bytes]:
        self.stop.set()
        self.join()
        assert self.error is None, self.error
        return self.acked


def on(bookie: str, create):
    while True:
        handle = create()
        if bookie in handle.metadata.ensembles[0]:
            return handle
        handle.close()


def interrupt_midway(procs: Procs, args: list[str], sig: int, started=lambda: None) -> str:
    """Start the command, call ``started`` once it has begun, send ``sig`` once it has
    replaced the bookie in two ledgers, and return what it wrote on stderr."""
    proc = procs.embedlog(*args)
    assert proc.stderr is not None
    seen = []
    replaced = 0
    for line in proc.stderr:
        seen.append(line)
        if line.startswith("decommissioning "):
            started()
        if ": replacing " in line:
            replaced += 1
            if replaced == 3:  # the copy for the second ledger is done, a third under way
                proc.send_signal(sig)
                break
    else:
        raise AssertionError(f"exited ({proc.wait()}) before a third ledger: {''.join(seen)}")
    seen.append(proc.stderr.read())
    # Ctrl-C is a clean exit (130, no traceback); SIGKILL leaves no chance to clean up.
    assert proc.wait() == (130 if sig == signal.SIGINT else -sig), "".join(seen)
    return "".join(seen)


def test_decommission_under_live_writers_interrupted_and_run_again(
    procs: Procs, tmp_path: Path, zk_uri: str
) -> None:
    cluster = LocalCluster(4, tmp_path / "cluster", processes=True, metadata_uri=zk_uri).start()
    try:
        client = cluster.client("app")
        first = client.create_ledger(3, 2, 2)
        victim = first.metadata.ensembles[0][0]
        first.close()
        closed: dict[int, dict[int, bytes]] = {}
        for n in range(LEDGERS):
            wh = on(victim, lambda: client.create_ledger(3, 2, 2))
            futures = {i: wh.add_async(b"ledger %d entry %d" % (n, i)) for i in range(ENTRIES)}
            closed[wh.ledger_id] = {
                f.result(): b"ledger %d entry %d" % (n, i) for i, f in futures.items()
            }
            wh.close()
        bounded = on(victim, lambda: client.create_ledger(3, 2, 2))
        stream = on(victim, lambda: client.create_unbounded(3, 2, 2))
        writers = [Appender(bounded.add, b"bounded"), Appender(stream.append, b"stream")]
        for w in writers:  # entries on the bookie in the writers' last fragments
            for _ in range(200):
                data = w.prefix + b"-early-%d" % len(w.acked)
                w.acked[w.append(data)] = data
        cluster.stop_bookie(victim)  # SIGTERM: a clean stop
        assert {bounded.ledger_id, stream.ledger_id} <= {
            lid
            for lid in cluster.metadata.list_ledgers()
            if victim in cluster.metadata.read_ledger(lid).last_fragment[1]
        }

        def start_writers() -> None:  # while the decommission runs: moved by their writers
            for w in writers:
                if not w.is_alive():
                    w.start()

        args = ["bookie", "decommission", victim, "--metadata-uri", zk_uri]
        err = interrupt_midway(procs, args, signal.SIGINT, start_writers)
        assert "Traceback" not in err, err
        err = interrupt_midway(procs, args, signal.SIGKILL)
        meta = cluster.metadata
        assert meta.read_cookie(victim) is not None  # not retired yet
        assert meta.underreplicated()  # the killed run left its mark on a ledger

        done = procs.embedlog(*args)
        out, err = finish(done, 120)
        assert done.returncode == 0, out + err
        assert f"bookie {victim}: " in out and "retired (cookie and registration removed)" in out
        assert "entries copied" in err  # the progress bar, on stderr
        acked = [w.finish() for w in writers]

        assert all(len(a) > 200 for a in acked), "the writers kept appending"
        assert meta.read_cookie(victim) is None
        assert victim not in meta.known_bookies()
        for lid in meta.list_ledgers():
            assert victim not in meta.read_ledger(lid).bookies(), lid
        assert meta.underreplicated() == {}

        bounded.close()
        reader = cluster.client("reader")
        for lid, data in closed.items():
            assert {e.entry_id: e.data for e in reader.open_ledger(lid).entries()} == data
        got = {e.entry_id: e.data for e in reader.open_ledger(bounded.ledger_id).entries()}
        assert got == acked[0]
        assert {e.entry_id: e.data for e in stream.read(0, max(acked[1]))} == acked[1]

        check = procs.embedlog("auditor", "check", "--metadata-uri", zk_uri, "-q")
        out, err = finish(check, 120)
        assert check.returncode == 0, out + err
        assert "violations: 0" in out
    finally:
        cluster.stop()


def test_a_running_bookie_and_too_few_bookies_left_are_refused(
    procs: Procs, tmp_path: Path, zk_uri: str
) -> None:
    cluster = LocalCluster(3, tmp_path / "cluster", processes=True, metadata_uri=zk_uri).start()
    try:
        wh = cluster.client("app").create_ledger(3, 2, 2)
        for i in range(10):
            wh.add(b"entry %d" % i)
        wh.close()
        args = ["bookie", "decommission", "bookie-3", "--metadata-uri", zk_uri]
        running = procs.embedlog(*args)
        out, err = finish(running, 120)
        assert running.returncode == 2, out + err
        assert err.startswith("embedlog bookie decommission: error: bookie bookie-3 is running")
        assert "stop it first (SIGTERM)" in err and len(err.strip().splitlines()) == 1

        cluster.stop_bookie("bookie-3")
        version = cluster.metadata.read_ledger(wh.ledger_id).version
        proc = procs.embedlog(*args)
        out, err = finish(proc, 120)

        assert proc.returncode == 2, out + err
        (line,) = err.strip().splitlines()
        assert line.startswith("embedlog bookie decommission: error: cannot decommission bookie-3")
        assert "no other writable bookie can take its place (2 remain: bookie-1, bookie-2)" in line
        assert cluster.metadata.read_ledger(wh.ledger_id).version == version
        assert cluster.metadata.read_cookie("bookie-3") is not None
    finally:
        cluster.stop()
