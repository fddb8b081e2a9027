"""The runtime's loop drains its self-pipe with one ``recv`` per wake-up when it can, and
still runs every callback handed to it from other threads (embedlog/eventloop.py)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from embedlog.eventloop import RuntimeLoop, new_event_loop
from embedlog.runtime import Runtime


class CountingSocket:
    """The loop's end of its self-pipe, counting ``recv`` calls and those that found it
    empty (a system call made only to learn that)."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self.recvs = 0
        self.empty = 0

    def recv(self, n: int) -> bytes:
        self.recvs += 1
        try:
            return bytes(self._sock.recv(n))
        except BlockingIOError:
            self.empty += 1
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def running(loop: asyncio.AbstractEventLoop) -> threading.Thread:
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    return thread


def stop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    loop.call_soon_threadsafe(loop.stop)
    thread.join(30)
    loop.close()


def test_the_runtime_runs_on_this_loop():
    runtime = Runtime("t")
    try:
        assert isinstance(runtime.loop, RuntimeLoop)
    finally:
        runtime.close()


def test_a_wake_up_costs_one_recv():
    loop = new_event_loop()
    counting = CountingSocket(loop._ssock)  # type: ignore[attr-defined]
    loop._ssock = counting  # type: ignore[attr-defined]
    thread = running(loop)
    woken = threading.Event()
    wakes = 200
    for _ in range(wakes):
        woken.clear()
        loop.call_soon_threadsafe(woken.set)
        assert woken.wait(30)
    stop(loop, thread)
    # asyncio's stock loop calls recv until BlockingIOError: an empty one per drain.
    assert counting.recvs > 0 and counting.empty <= wakes // 20


def test_every_callback_from_other_threads_runs_and_a_full_pipe_is_drained():
    loop = new_event_loop()
    thread = running(loop)
    ran = [0]
    hold, held = threading.Event(), threading.Event()

    def block() -> None:  # the loop is busy while the pipe fills past one recv's worth
        held.set()
        hold.wait(30)

    loop.call_soon_threadsafe(block)
    assert held.wait(30)

    def bump() -> None:
        ran[0] += 1

    def hand_over(n: int) -> None:
        for _ in range(n):
            loop.call_soon_threadsafe(bump)

    senders = [threading.Thread(target=hand_over, args=(3000,)) for _ in range(4)]
    for s in senders:
        s.start()
    for s in senders:
        s.join()
    hold.set()
    done = threading.Event()
    loop.call_soon_threadsafe(done.set)
    assert done.wait(30)
    stop(loop, thread)
    assert ran[0] == 12_000
