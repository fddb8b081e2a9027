"""Running the real ``embedlog`` command in a subprocess, and fingerprints of directories."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def embedlog_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", **extra)
    # The tree under test, whatever the installed copy points at.
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def run(
    *argv: str,
    stdin: str | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
):
    """``python -m embedlog ARGV`` (in ``cwd``): the completed process (text)."""
    return subprocess.run(
        [sys.executable, "-m", "embedlog", *argv],
        capture_output=True,
        text=True,
        input=stdin,
        env=env or embedlog_env(),
        cwd=cwd,
        timeout=300,
    )


def fingerprint(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under ``root``: (kind, size, mtime_ns). Equal before and after a command
    means the command created, removed and changed nothing there."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            st = p.lstat()
            out[str(p.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out
