"""Processes of a Spark job, killed the way a machine failure kills them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process, one pass over /proc."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                out[int(entry.name)] = int(
                    (entry / "stat").read_text().rpartition(")")[2].split()[1]
                )
            except OSError:
                continue
    return out


def _tree(root: int) -> set[int]:
    parents = _parents()
    tree = {root}
    grew = True
    while grew:
        below = {pid for pid, parent in parents.items() if parent in tree}
        grew = not below <= tree
        tree |= below
    return tree


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def kill_tree(root: subprocess.Popen[str]) -> set[int]:
    """SIGKILL the driver and every process under it, as a machine failure would: all are
    stopped first (so none acts on another's death, and none forks unseen), then killed.
    Spark's Python worker daemon makes a process group of its own, so a killpg of the
    driver's group would miss it and the workers it forks (the commit runs in one)."""
    frozen: set[int] = set()
    while new := _tree(root.pid) - frozen:
        for pid in new:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        frozen |= new
    for pid in frozen:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    root.wait()
    while any(_alive(pid) for pid in frozen):  # orphans, reaped by init
        time.sleep(0.05)
    return frozen


def driver_env(*paths: str) -> dict[str, str]:
    """The environment of a Spark driver process the tests start: ``paths`` first on
    PYTHONPATH, then the repository (so Spark's workers import this checkout)."""
    root = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH", "")
    return dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([*paths, root, *([path] if path else [])]),
        PYSPARK_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
        # What the tests' own session runs with (conftest.py): 127.0.0.1 only, no UI, a
        # JVM that starts fast on a small machine.
        PYSPARK_SUBMIT_ARGS=" ".join(
            [
                "--conf spark.driver.host=127.0.0.1",
                "--conf spark.driver.bindAddress=127.0.0.1",
                "--conf spark.ui.enabled=false",
                "--conf spark.driver.extraJavaOptions='-XX:TieredStopAtLevel=1 -XX:+UseSerialGC'",
                "pyspark-shell",
            ]
        ),
    )
