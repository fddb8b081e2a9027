"""The baseline every benchmark is compared against: raw fsync'd appends on the same disk."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Run = Callable[[Path], dict[str, float]]
Report = Callable[[dict[str, float]], str]


def raw_fsync_appends(directory: Path, entries: int, size: int, group: int) -> float:
    """Append ``entries`` blocks of ``size`` bytes, fsync every ``group`` of them; entries/s."""
    path = directory / "baseline.bin"
    block = os.urandom(size)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        pending = 0
        for _ in range(entries):
            os.write(fd, block)
            pending += 1
            if pending == group:
                os.fsync(fd)
                pending = 0
        if pending:
            os.fsync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        path.unlink()
    return entries / elapsed


def measure_once(benchmark: Any, run: Run, directory: Path, report: Report) -> dict[str, float]:
    """Run a benchmark once under pytest-benchmark: its figures go to the saved results
    (extra_info) and its report to the output."""
    result = benchmark.pedantic(lambda: run(directory), rounds=1, iterations=1)
    benchmark.extra_info.update(result)
    print(report(result))
    return result


def main(run: Run, report: Report) -> None:
    """``python benchmarks/bench_x.py``: one run in a temporary directory, reported.
    Takes no options: ``--help`` prints the benchmark's docstring, anything else is an
    error (before anything runs)."""
    doc = sys.modules["__main__"].__doc__ or ""
    argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()
    with tempfile.TemporaryDirectory() as d:
        print(report(run(Path(d))))
