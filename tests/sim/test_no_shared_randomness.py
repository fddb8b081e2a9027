"""A history depends on its seed alone: nothing the simulator runs draws from the
``random`` module's shared generator, which any other thread of the process (a kazoo
client's retry jitter, another test's cluster) may draw from at any moment.

Seen in CI: seed 7 of ``unbounded-streams`` gave two different histories in one pytest
process, because a stream writer chose which bookies to leave out of a new fragment with
``random.sample`` while a thread left over by an earlier test drew from the same generator.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from embedlog.testing.scenarios import SCENARIOS
from embedlog.testing.sim import run_seed

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def another_thread_drawing_from_the_shared_generator() -> Iterator[None]:
    stop = threading.Event()

    def draw() -> None:
        while not stop.is_set():
            random.random()

    thread = threading.Thread(target=draw, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextmanager
def shared_generator_forbidden() -> Iterator[list[str]]:
    """The module's draws raise on this thread (the simulator's), and are counted."""
    sim_thread = threading.get_ident()
    calls: list[str] = []
    names = (
        "random",
        "sample",
        "choice",
        "choices",
        "shuffle",
        "uniform",
        "randint",
        "randrange",
        "getrandbits",
        "seed",
        "getstate",
        "setstate",
    )
    saved = {name: getattr(random, name) for name in names}

    def guard(name: str):  # type: ignore[no-untyped-def]
        real = saved[name]

        def call(*args, **kwargs):  # type: ignore[no-untyped-def]
            if threading.get_ident() == sim_thread:
                calls.append(name)
                raise AssertionError(f"random.{name}() drawn from the shared generator")
            return real(*args, **kwargs)

        return call

    for name in names:
        setattr(random, name, guard(name))
    try:
        yield calls
    finally:
        for name, real in saved.items():
            setattr(random, name, real)


@pytest.mark.parametrize("scenario", ["unbounded", "unbounded-streams"])
def test_a_history_does_not_change_when_another_thread_draws_random_numbers(scenario):
    quiet = [run_seed(seed, scenario).trace_hash for seed in (7, 8)]
    with another_thread_drawing_from_the_shared_generator():
        busy = [run_seed(seed, scenario).trace_hash for seed in (7, 8)]
    assert busy == quiet


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_simulator_never_touches_the_shared_generator(scenario):
    with shared_generator_forbidden() as calls:
        results = [run_seed(seed, scenario, keep_trace=False) for seed in range(2)]
    assert calls == []
    assert all(r.ok for r in results), [r.violations for r in results if not r.ok]


# Seeds whose histories once followed the process's string hashing (the order a set of
# bookie names iterates in): a retried bookie's timer, a deleted ledger's bookies.
HASH_SENSITIVE = [("bounded", 3), ("bounded-races", 6), ("unbounded", 0), ("unbounded-streams", 0)]

_HASHES = """
import sys
from embedlog.testing.sim import run_seed
for arg in sys.argv[1:]:
    scenario, seed = arg.rsplit(":", 1)
    print(run_seed(int(seed), scenario, keep_trace=False).trace_hash)
"""


def test_a_seed_gives_the_same_history_in_every_process():
    """``embedlog chaos --jobs`` runs seeds in other processes and a seed is replayed in
    yet another: its history must not depend on PYTHONHASHSEED."""
    args = [f"{scenario}:{seed}" for scenario, seed in HASH_SENSITIVE]
    runs = []
    for hash_seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed, PYTHONPATH=str(ROOT))
        runs.append(
            subprocess.Popen(
                [sys.executable, "-c", _HASHES, *args],
                env=env,
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    outputs = [p.communicate()[0].split() for p in runs]
    assert all(p.returncode == 0 for p in runs)
    assert len(outputs[0]) == len(args)
    assert dict(zip(args, outputs[0], strict=True)) == dict(zip(args, outputs[1], strict=True))
