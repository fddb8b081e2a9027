"""``embedlog ledger tail --follow`` through a ZooKeeper outage: it keeps following, says
once that it waits, and prints what was appended meanwhile once ZooKeeper is back."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from procs import Procs, env, finish, wait_line

from embedlog import LocalCluster
from embedlog.metadata.zkserver import ZooKeeperServer, free_port

WAITING = "waiting for the metadata store to answer again"


@pytest.mark.parametrize("kind", ["ledger", "stream"])
def test_ledger_tail_follows_through_a_zookeeper_outage(
    procs: Procs, tmp_path: Path, kind: str
) -> None:
    zk = ZooKeeperServer(tmp_path / "zk", port=free_port())
    zk.start()
    try:
        uri = zk.uri("/follow")
        with LocalCluster(3, tmp_path / "cluster", transport="tcp", metadata_uri=uri) as cluster:
            client = cluster.client("writer")
            if kind == "ledger":
                wh = client.create_ledger(3, 3, 2)
                target, append = str(wh.ledger_id), wh.add
            else:
                ul = client.create_unbounded(3, 3, 2, name="events")
                target, append = "events", ul.append
            append(b"before")
            said = tmp_path / "tail.err"  # its stderr, read while it runs
            with said.open("w") as stderr:
                tail = subprocess.Popen(
                    [
                        sys.executable, "-m", "embedlog", "ledger", "tail", target, "--follow",
                        "--metadata-uri", uri, "--metadata-timeout", "1",
                    ],
                    env=env(), text=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                    stderr=stderr,
                )  # fmt: skip
            procs.started.append(tail)
            wait_line(tail, "before")
            zk.stop()
            append(b"during")  # the bookies need no ZooKeeper
            # The tail's metadata reads give up (1 s), and it waits on (a tail that never
            # says so is failed below) ...
            deadline = time.monotonic() + 60
            while WAITING not in said.read_text().splitlines() and time.monotonic() < deadline:
                assert tail.poll() is None, said.read_text()
                time.sleep(0.05)
            # ... and tries again (a 0.5 s pause, a 1 s metadata timeout): one that said it on
            # every try would say it twice.
            time.sleep(2.0)
            zk.start()
            append(b"after")
            wait_line(tail, "during")
            wait_line(tail, "after")
            tail.send_signal(signal.SIGINT)
            try:
                finish(tail)
            except pytest.fail.Exception as exc:  # its threads' stacks went to the file
                pytest.fail(f"{exc}\n{said.read_text()}", pytrace=False)
            err = said.read_text()
        assert tail.returncode == 0, err
        lines = err.splitlines()
        assert lines.count(WAITING) == 1, err
        assert lines.count("the metadata store answers again; following on") == 1, err
        outage = [line for line in lines if " WARNING " in line]
        assert len(outage) == 1, err
        assert f"ZooKeeper at {zk.hosts} is unreachable" in outage[0]
    finally:
        zk.stop()
