"""Seeds run in worker processes: ``embedlog chaos --jobs N``.

A simulation owns its process while it runs (one loop, the random module seeded), so seeds run
side by side only in processes. Workers are forks of the command when it runs one
thread only (they start with its modules imported: a spawned worker spends a third of
a CPU second importing them, more than five seeds' work), and new interpreters
(spawned) otherwise, since a fork of a process whose other threads hold locks can
deadlock. Either way they run under the command's PYTHONHASHSEED=0, and a seed's
history depends on nothing a process keeps between seeds: its hash is the same in a
worker as in the command itself. Results come back in seed order, whatever order
workers finish in.
"""

from __future__ import annotations

import gc
import multiprocessing
import threading
from collections.abc import Generator, Iterable

from embedlog.testing.limits import Limits
from embedlog.testing.sim import GC_YOUNG_THRESHOLD, run_seed
from embedlog.testing.simtrace import SeedResult

# Seeds handed to a worker at a time, at most (``_chunk``).
CHUNK = 4


def _one(job: tuple[int, str, str | None, str, bool, bool, frozenset[int]]) -> SeedResult:
    seed, scenario, unsafe, limits, keep_trace, quiet, suppress = job
    return run_seed(
        seed,
        scenario,
        unsafe=unsafe,
        keep_trace=keep_trace,
        quiet=quiet,
        limits=Limits.parse(limits) if limits else None,
        suppress=suppress,
    )


def _one_in_worker(
    job: tuple[int, str, str | None, str, bool, bool, frozenset[int]],
) -> SeedResult:
    """``_one``, then the seed's cyclic garbage collected before the next seed starts.

    Left to the collector's own schedule, a seed's garbage (its loop, bookies, tasks,
    futures) is promoted into the oldest generation and found only at a rare full
    collection, and a worker slows as it runs: 31.8 seeds/s over its first 500 seeds
    of ``unbounded-nojournal-races``, 26.4 over seeds 2,500-3,000 (two workers); with
    this collection 32.7 and 33.6 (measured). A worker froze what it started with, so
    the collection walks only what the seed left. The caller's own process is not
    collected (``jobs`` = 1): its heap may be large and not frozen."""
    try:
        return _one(job)
    finally:
        gc.collect()


def _start_worker() -> None:
    """A worker starts with the command's modules frozen (the collector never scans them
    again: 3% of a stream seed's CPU) and keeps a seed's rarer collections
    (``run_seed``) for its whole life. Were they a seed's only, the usual threshold,
    back as the seed ends, would start a collection of the seed's objects while they
    are still alive, before ``_one_in_worker`` collects them as garbage: seeds
    30000-30079 of ``unbounded-nojournal-races`` took 2.3% more CPU (three runs each)."""
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def start_method(threads: int) -> str:
    """How workers start: forked from a process of one thread (no other thread can hold a
    lock across the fork), spawned otherwise."""
    return "fork" if threads == 1 else "spawn"


def run_seeds(
    seeds: Iterable[int],
    scenario: str,
    *,
    unsafe: str | None = None,
    limits: Limits | None = None,
    jobs: int = 1,
    keep_trace: bool = False,
    quiet: bool = True,
    suppress: frozenset[int] = frozenset(),
    method: str | None = None,
) -> Generator[SeedResult, None, None]:
    """Each seed's result, in seed order; with ``jobs`` > 1 in that many processes
    (started by ``method``, "fork" or "spawn"; by default ``start_method``'s choice).
    Closing the iterator early stops the workers."""
    work = [(s, scenario, unsafe, str(limits or ""), keep_trace, quiet, suppress) for s in seeds]
    if jobs <= 1 or len(work) <= 1:
        for job in work:
            yield _one(job)
        return
    method = method or start_method(threading.active_count())
    with multiprocessing.get_context(method).Pool(
        min(jobs, len(work)), initializer=_start_worker
    ) as pool:
        yield from pool.imap(_one_in_worker, work, chunksize=_chunk(len(work), jobs))


def _chunk(seeds: int, jobs: int) -> int:
    """Seeds a worker takes at a time: a few, because each hand-off costs the parent (its
    task and result threads wake, a pipe round trip): 1.1 ms of the parent's CPU per
    seed one at a time, which on a machine with a core per worker comes out of the
    workers' share; at most an eighth of a worker's share of the run, so that the
    workers end together."""
    return max(1, min(CHUNK, seeds // (jobs * 8)))
