"""Progress goes to stderr, and without a terminal it is a line now and then, not one
per unit of work: stdout stays the command's report."""

from __future__ import annotations

import math
import re
import time

from cli_helpers import run


def test_chaos_progress_is_on_stderr_and_not_a_line_per_seed() -> None:
    began = time.monotonic()
    out = run("chaos", "--seeds", "12", "--start", "5", "--jobs", "1")
    elapsed = time.monotonic() - began
    assert out.returncode == 0, out.stderr
    assert "[" not in out.stdout and "12/12 seeds" not in out.stdout
    assert "ran 12 seeds" in out.stdout and "no invariant violated" in out.stdout
    bars = [line for line in out.stderr.splitlines() if re.match(r"^\[[#.]+\] \d+/12 seeds", line)]
    assert bars[-1].startswith("[########################] 12/12 seeds")
    assert "(0 violating)" in bars[-1]
    # The first count, one every 10 s, the last: never one per seed.
    assert len(bars) <= 2 + math.ceil(elapsed / 10), bars
    assert len(bars) < 12
