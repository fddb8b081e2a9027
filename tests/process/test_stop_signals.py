"""The commands that run until stopped (``embedlog sandbox``, ``embedlog bookie``,
``embedlog auditor run``) and a blocking call's wait (``embedlog stream tail`` following a
stream) end on SIGINT and SIGTERM: every thread embedlog starts leaves both to the main
thread, and a wait for a stop also ends when the signal reached a thread of the
application's own."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
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


def _blocks_stop_signals(mask: int) -> bool:
    return all(mask >> (sig - 1) & 1 for sig in (signal.SIGINT, signal.SIGTERM))


def _stop_signal_masks(pid: int) -> dict[int, bool]:
    """For each of ``pid``'s threads: whether it blocks both SIGINT and SIGTERM."""
    masks = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except FileNotFoundError:
            continue  # ended meanwhile
        blocked = next(line for line in status.splitlines() if line.startswith("SigBlk:"))
        masks[int(tid)] = _blocks_stop_signals(int(blocked.split()[1], 16))
    return masks


def _assert_signals_go_to_the_main_thread(pid: int, what: str) -> None:
    """The kernel hands a signal sent to the process to a thread that does not block it:
    with every thread but the main one blocking both, the main one, whose wait it ends."""
    masks = _stop_signal_masks(pid)
    assert masks.pop(pid) is False, f"{what}: its main thread blocks SIGINT or SIGTERM"
    assert masks, f"{what} runs its main thread only"
    takers = [tid for tid, blocks in masks.items() if not blocks]
    assert not takers, (
        f"{what}: threads {takers} of {len(masks) + 1} may take a Ctrl-C the main thread "
        "then never sees while it waits"
    )


def test_threads_started_inside_to_main_thread_and_theirs_block_stop_signals():
    from embedlog.stopsignals import to_main_thread

    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    seen = {}

    def grandchild():
        seen["grandchild"] = signal.pthread_sigmask(signal.SIG_BLOCK, [])

    def child():
        seen["child"] = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        t = threading.Thread(target=grandchild)  # started outside the block: inherits it
        t.start()
        t.join()

    with to_main_thread():
        t = threading.Thread(target=child)
        t.start()
    t.join()
    for who in ("child", "grandchild"):
        assert {signal.SIGINT, signal.SIGTERM} <= seen[who], who
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before  # the caller's as it was


def test_the_runtime_and_disk_threads_leave_stop_signals_to_the_main_thread():
    from embedlog.bookie.diskthread import DiskThread
    from embedlog.runtime import Runtime

    runtime = Runtime("signals")
    disk = DiskThread("signals-disk")
    try:
        in_loop = runtime.call(signal.pthread_sigmask, signal.SIG_BLOCK, [])
        on_disk = disk.submit(signal.pthread_sigmask, signal.SIG_BLOCK, []).result()
    finally:
        disk.shutdown()
        runtime.close()
    assert {signal.SIGINT, signal.SIGTERM} <= in_loop
    assert {signal.SIGINT, signal.SIGTERM} <= on_disk


def _wait_stream(stream, text: str) -> str:
    seen = []
    for line in stream:
        seen.append(line)
        if text in line:
            return line
    pytest.fail(f"no {text!r} before the stream ended: {''.join(seen)}")


def test_the_sandbox_the_auditor_and_a_following_tail_stop_on_a_signal(
    procs: Procs, tmp_path: Path, zk_server: Any
) -> None:
    # zk_server only makes sure ZooKeeper is installed; the sandbox starts its own.
    sandbox = procs.embedlog("sandbox", "--bookies", "3", "--data-dir", str(tmp_path / "s"))
    uri = wait_line(sandbox, "metadata URI: ").split()[-1]
    wait_line(sandbox, "sandbox running")
    auditor = procs.embedlog("auditor", "run", "--metadata-uri", uri, "--interval", "3600")
    assert auditor.stderr is not None
    _wait_stream(auditor.stderr, "auditor running")

    import embedlog

    with embedlog.connect(uri, name="writer") as client:
        stream = client.create_unbounded(3, 3, 2, name="events")
        stream.append(b"first")
        # A tail following the stream: its main thread waits for the loop's next entry,
        # which never comes; only the signal ends that wait.
        tail = procs.embedlog("stream", "tail", "events", "--metadata-uri", uri)
        wait_line(tail, "first")
        stream.close()

    for proc, what in ((tail, "the tail"), (auditor, "the auditor"), (sandbox, "the sandbox")):
        _assert_signals_go_to_the_main_thread(proc.pid, what)

    tail.send_signal(signal.SIGINT)
    _out, err = finish(tail, HANG)
    assert tail.returncode == 0, err

    auditor.send_signal(signal.SIGINT)
    _out, err = finish(auditor, HANG)
    assert auditor.returncode == 0, err
    assert "stopping after the pass under way" in err

    sandbox.send_signal(signal.SIGTERM)
    out, err = finish(sandbox, HANG)
    assert sandbox.returncode == 0, err
    assert "sandbox stopped" in out
