"""The commands that run until stopped (``embedlog sandbox``, ``embedlog bookie``,
``embedlog auditor run``) stop on SIGINT and SIGTERM whichever of their threads the
kernel hands the signal to."""

import ctypes
import os
import platform
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from procs import Procs, finish, wait_line

# Run in a process of its own: the signal and the handlers must not touch pytest's.
SCRIPT = textwrap.dedent(
    """
    import signal, threading, time
    from embedlog.stopsignals import StopSignals

    def send_to_this_thread():
        time.sleep(0.2)  # the main thread is in wait() by then (and keeps waiting if not)
        signal.pthread_kill(threading.get_ident(), signal.{sig})

    with StopSignals() as signals:
        threading.Thread(target=send_to_this_thread).start()
        signals.wait()
    print("stopped", flush=True)
    """
)

# A hang guard, not a speed limit: the stop takes well under a second.
HANG = 120


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_handed_to_another_thread_still_stops_the_wait(sig):
    # The main thread blocks in wait(); the signal reaches another thread, as the kernel
    # may choose. Python runs the handler only in the main thread, and a main thread
    # blocked in Event.wait() with no timeout never ran it: the command ignored Ctrl-C.
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(sig=sig)],
        capture_output=True,
        text=True,
        timeout=HANG,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "stopped\n"


def test_a_second_signal_during_the_stop_says_so(capfd):
    from embedlog.stopsignals import StopSignals

    with StopSignals(repeat_message="already stopping; please wait") as signals:
        signals._handle(2, None)
        signals.wait()
        signals._handle(2, None)
    assert capfd.readouterr().err == "already stopping; please wait\n"


# tgkill's number: Python can signal one thread of its own process only (pthread_kill).
_SYS_TGKILL = {"x86_64": 234, "aarch64": 131}


def _signal_a_thread_not_the_main_one(pid: int, sig: int) -> None:
    """``sig`` to one of ``pid``'s threads other than its main one, as the kernel may
    hand a signal sent to the whole process."""
    number = _SYS_TGKILL.get(platform.machine())
    if number is None:
        pytest.skip(f"no tgkill number known for {platform.machine()}")
    others = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
    assert others, f"process {pid} runs its main thread only"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(number, pid, others[0], sig) != 0:
        raise OSError(ctypes.get_errno(), f"tgkill({pid}, {others[0]}, {sig})")


def _wait_stream(stream, text: str) -> str:
    seen = []
    for line in stream:
        seen.append(line)
        if text in line:
            return line
    pytest.fail(f"no {text!r} before the stream ended: {''.join(seen)}")


def test_the_sandbox_and_the_auditor_stop_on_a_signal_to_any_of_their_threads(
    procs: Procs, tmp_path: Path, zk_server: Any
) -> None:
    # zk_server only makes sure ZooKeeper is installed; the sandbox starts its own.
    sandbox = procs.embedlog("sandbox", "--bookies", "3", "--data-dir", str(tmp_path / "s"))
    uri = wait_line(sandbox, "metadata URI: ").split()[-1]
    wait_line(sandbox, "sandbox running")
    auditor = procs.embedlog("auditor", "run", "--metadata-uri", uri, "--interval", "3600")
    assert auditor.stderr is not None
    _wait_stream(auditor.stderr, "auditor running")

    _signal_a_thread_not_the_main_one(auditor.pid, signal.SIGINT)
    out, err = finish(auditor, HANG)
    assert auditor.returncode == 0, err
    assert "stopping after the pass under way" in err

    _signal_a_thread_not_the_main_one(sandbox.pid, signal.SIGTERM)
    out, err = finish(sandbox, HANG)
    assert sandbox.returncode == 0, err
    assert "sandbox stopped" in out
