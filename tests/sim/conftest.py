"""The simulator's histories depend on string hashing (protocol code iterates over sets
of bookie ids), so a seed names one history only under one PYTHONHASHSEED. The tests here
name seeds (first violating seeds, seeds that found bugs): they run under
PYTHONHASHSEED=0, as `embedlog chaos` does. Collected under any other, the whole pytest
command is started again with it, before any test runs."""

from __future__ import annotations

import os
import sys

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("PYTHONHASHSEED") == "0":
        return
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.stop_global_capturing()  # the new process writes to the real stdout
    sys.stdout.flush()
    os.execve(sys.executable, sys.orig_argv, {**os.environ, "PYTHONHASHSEED": "0"})
