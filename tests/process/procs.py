"""Helpers for tests that run bookies, writers and readers as processes of their own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def env() -> dict[str, str]:
    """The environment of a child: it imports the embedlog of this tree."""
    path = os.environ.get("PYTHONPATH", "")
    return dict(
        os.environ,
        PYTHONPATH=f"{ROOT}{os.pathsep}{path}" if path else str(ROOT),
        # A child that hangs is sent SIGABRT by ``finish``: Python then prints every
        # thread's stack to stderr, which the failure shows.
        PYTHONFAULTHANDLER="1",
    )


def processes_mentioning(text: str) -> list[int]:
    """Pids of live processes whose command line mentions ``text`` (orphans, say)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


class Procs:
    """Child processes of one test: every one is killed when the test ends, pass or fail."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[str]] = []

    def popen(self, args: list[str], **kw: object) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            args,
            env=env(),
            text=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            **kw,  # type: ignore[call-overload]
        )
        self.started.append(proc)
        return proc

    def embedlog(self, *args: str) -> subprocess.Popen[str]:
        return self.popen([sys.executable, "-m", "embedlog", *args])

    def python(self, script: str, *args: str) -> subprocess.Popen[str]:
        return self.popen([sys.executable, "-c", script, *args])

    def cleanup(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)  # a stopped process dies only once continued
                proc.kill()
            proc.wait()
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()


def finish(proc: subprocess.Popen[str], timeout: float = 60.0) -> tuple[str, str]:
    """``proc.communicate(timeout)``; a process still running then is aborted (SIGABRT)
    and the test fails with the stacks of its threads, so a hang says where it hangs."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"{proc.args} still ran {timeout}s later; its threads:\n{err}\n{out}")


def wait_line(proc: subprocess.Popen[str], text: str, timeout: float = 60.0) -> str:
    """The first stdout line containing ``text``; fails (with stderr) if the process exits."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            err = proc.stderr.read() if proc.stderr else ""
            pytest.fail(f"process exited ({proc.wait()}) before {text!r}: {''.join(seen)}{err}")
        seen.append(line)
        if text in line:
            return line
    pytest.fail(f"no {text!r} within {timeout}s: {''.join(seen)}")
