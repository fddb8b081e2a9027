from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from procs import Procs, processes_mentioning


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    """Child processes killed at the end of the test, however it ends; then no process
    that works under tmp_path may be left (an orphan of a LocalCluster, say)."""
    p = Procs()
    try:
        yield p
    finally:
        p.cleanup()
    assert processes_mentioning(str(tmp_path)) == []
