"""The baseline every benchmark is compared against: raw fsync'd appends on the same disk."""

from __future__ import annotations

import os
import time
from pathlib import Path


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
