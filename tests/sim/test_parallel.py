"""Seeds in worker processes (parallel.py): how workers start, and that it changes no history."""

from __future__ import annotations

import gc
import multiprocessing
import threading

from embedlog.testing import parallel
from embedlog.testing.parallel import run_seeds, start_method
from embedlog.testing.sim import run_seed


def test_workers_are_forked_only_from_a_process_of_one_thread():
    assert start_method(1) == "fork"
    assert start_method(2) == "spawn"


def test_forked_and_spawned_workers_give_the_histories_of_the_command():
    here = [run_seed(s, "bounded", keep_trace=False).trace_hash for s in range(30, 32)]
    for method in ("fork", "spawn"):
        workers = run_seeds(range(30, 32), "bounded", jobs=2, method=method)
        assert [r.trace_hash for r in workers] == here, method


def test_with_another_thread_running_workers_are_spawned(monkeypatch):
    started: list[str] = []
    real = multiprocessing.get_context

    def get_context(method: str):
        started.append(method)
        return real(method)

    monkeypatch.setattr(multiprocessing, "get_context", get_context)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        results = list(run_seeds(range(30, 32), "bounded", jobs=2))
    finally:
        stop.set()
        other.join()
    assert started == ["spawn"]
    assert [r.seed for r in results] == [30, 31]


def test_a_worker_collects_a_seeds_garbage_before_the_next_seed():
    # Without the collection a seed's cycles (loop, bookies, tasks) outlive it and a
    # worker slows as it runs (parallel.py: _one_in_worker).
    job = (30, "bounded", None, "", False, True, frozenset())
    gc.collect()
    gc.disable()  # no automatic collection may find the garbage first
    try:
        parallel._one(job)
        assert gc.collect() > 0  # a seed leaves cyclic garbage behind
        result = parallel._one_in_worker(job)
        assert gc.collect() == 0
    finally:
        gc.enable()
    assert result.seed == 30
