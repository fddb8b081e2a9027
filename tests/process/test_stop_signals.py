"""The commands that run until stopped (``embedlog sandbox``, ``embedlog bookie``) stop
on SIGINT and SIGTERM whichever of their threads the kernel hands the signal to."""

import subprocess
import sys
import textwrap

import pytest

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
