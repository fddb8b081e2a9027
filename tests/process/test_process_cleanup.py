"""Bookie processes never outlive what started them: a LocalCluster's stop, a failing
test, or its process killed outright (issue #17)."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from procs import Procs, env, processes_mentioning, wait_line

OWNER = r"""
import sys, time
from embedlog import LocalCluster
c = LocalCluster(3, sys.argv[1], processes=True, metadata_uri=sys.argv[2]).start()
w = c.client("w").create_ledger(3, 3, 2)
w.add(b"x")
c.pause_bookie("bookie-3")
print("pids", *[c.bookie_pid(b) for b in c.bookie_ids], flush=True)
time.sleep(3600)
"""


def _gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for pid in pids:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
            except OSError:
                continue
            if state != "Z":
                alive.append(pid)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def test_bookies_stop_when_their_cluster_process_is_killed(
    procs: Procs, tmp_path: Path, zk_uri: str
) -> None:
    owner = procs.python(OWNER, str(tmp_path / "c"), zk_uri)
    pids = [int(p) for p in wait_line(owner, "pids").split()[1:]]
    assert len(pids) == 3
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait()
    # The two running bookies see their stdin close and stop cleanly; the paused one
    # cannot see anything until continued (documented): continue it as an operator would.
    assert _gone(pids[:2], 30) == []
    assert _gone(pids[2:], 0) == [pids[2]]
    os.kill(pids[2], signal.SIGCONT)
    assert _gone(pids, 30) == []
    for bid in ("bookie-1", "bookie-2"):
        log = (tmp_path / "c" / bid / "bookie.log").read_text()
        assert f"bookie {bid} stopped cleanly" in log


def test_a_failing_test_leaves_no_bookie_process(pytester: pytest.Pytester, zk_uri: str) -> None:
    pytester.makepyfile(
        f"""
        from embedlog import LocalCluster

        def test_fails(tmp_path):
            with LocalCluster(3, tmp_path / "c", processes=True, metadata_uri={zk_uri!r}) as c:
                c.pause_bookie("bookie-1")
                c.crash_bookie("bookie-2")
                assert False, "this test fails with its cluster running"

        def test_never_stops_its_cluster(tmp_path):
            c = LocalCluster(2, tmp_path / "d", processes=True, metadata_uri={zk_uri + "-2"!r})
            c.start()
            c.pause_bookie("bookie-1")
            raise RuntimeError("left running")
        """
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-q", "--basetemp", str(pytester.path / "t")
    )
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*this test fails with its cluster running*", "*left running*"])
    assert _gone(processes_mentioning(str(pytester.path)), 30) == []


def test_the_child_runs_this_trees_embedlog() -> None:
    from embedlog.process.supervisor import _child_env

    root = str(Path(__file__).resolve().parents[2])
    assert _child_env()["PYTHONPATH"].split(os.pathsep)[0] == root
    assert env()["PYTHONPATH"].split(os.pathsep)[0] == root
    assert sys.executable
