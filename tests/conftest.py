from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from embedlog import LocalCluster

sys.path.insert(0, str(Path(__file__).parent))
pytest_plugins = ["zkserver", "escaped_errors", "pytester"]

# CI (README's test command) runs the suite in two pytest-xdist workers (`-n 2 --dist
# loadgroup -m "not alone"`), then `-m alone` in one process. The tests that take the
# machine run one at a time, on one worker: Spark's JVM (the tests sharing the session
# SparkSession, and docs/spark.md's samples), the simulator's runs in two worker processes,
# and a ZooKeeper outage followed by a tail. Two Spark drivers at once miss the Python
# workers' 10 s connect-back timeout on 2 cores. A worker runs many tests in one process:
# a test must not count what threads of earlier tests do (test_injected_clock scopes its
# guard to its own thread) nor race a background task it does not need (the BP-46 boot
# test of a displaced writer runs without the repair).
HEAVY_GROUP = "heavy"
_HEAVY_FILES = {"test_every_scenario.py", "test_zk_outage_follow.py"}
# Tests whose point is that a ZooKeeper session outlives a restart of the server: its 10 s
# start to count the moment the server starts, and beside a second worker a restarted
# ZooKeeper expired them twice in two runs. They are marked ``alone``, to run after the
# others in one process.
ALONE_FILES = {"test_zk_outage.py", "test_zk_outage_processes.py"}


def _takes_the_machine(item: pytest.Item) -> bool:
    path = Path(str(item.path))
    return (
        path.parent.name == "spark"
        or path.name in _HEAVY_FILES
        or (path.name == "test_samples.py" and "spark.md" in item.name)
    )


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the marks given here
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.path)).name in ALONE_FILES:
            item.add_marker(pytest.mark.alone)
        elif _takes_the_machine(item):
            item.add_marker(pytest.mark.xdist_group(HEAVY_GROUP))


def pytest_configure(config: pytest.Config) -> None:
    _under_hash_seed_zero(config)
    # Tests stop the processes they start with SIGINT (Ctrl-C). A child inherits an ignored
    # SIGINT, and a suite started in the background by a shell without job control (`pytest
    # &` in a script) has one, so its children would not stop: give SIGINT back its default.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def make_cluster(tmp_path):
    """Start LocalClusters under tmp_path; all are stopped at the end of the test."""
    started: list[LocalCluster] = []

    def make(num_bookies: int = 3, **kw) -> LocalCluster:
        kw.setdefault("data_dir", tmp_path / f"cluster{len(started)}")
        c = LocalCluster(num_bookies, **kw).start()
        started.append(c)
        return c

    yield make
    for c in started:
        c.stop()


@pytest.fixture
def cluster(make_cluster) -> LocalCluster:
    return make_cluster(3)


def _under_hash_seed_zero(config: pytest.Config) -> None:
    """The simulator's histories depend on string hashing (protocol code iterates over sets
    of bookie ids), so a seed names one history only under one PYTHONHASHSEED. The suite
    names seeds (first violating seeds, seeds that found bugs, tests/sim): it runs under
    PYTHONHASHSEED=0, as `embedlog chaos` does. Started under any other, the pytest command
    starts again with it here, in the first process, before any test or xdist worker: a
    worker started again would lose its channel to the controller."""
    if os.environ.get("PYTHONHASHSEED") == "0":
        return
    if os.environ.get("PYTEST_XDIST_WORKER"):
        raise pytest.UsageError(
            "an xdist worker started without PYTHONHASHSEED=0: run pytest from the project "
            "root (tests/conftest.py sets it for the controller and its workers)"
        )
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.stop_global_capturing()  # the new process writes to the real stdout
    sys.stdout.flush()
    os.execve(sys.executable, sys.orig_argv, {**os.environ, "PYTHONHASHSEED": "0"})
