from __future__ import annotations

import sys
from pathlib import Path

import pytest

from embedlog import LocalCluster

sys.path.insert(0, str(Path(__file__).parent))
pytest_plugins = ["zkserver", "escaped_errors", "pytester"]


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
