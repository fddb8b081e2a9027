"""Seeds run in worker processes: ``embedlog chaos --jobs N``.

A simulation owns its process while it runs (one loop, the clock patched), so seeds run
side by side only in processes. Workers are new interpreters (spawned, not forked: a
process that ran a simulation may hold LevelDB's background thread mid-work, and a fork
of it can deadlock), started with the environment of the chaos command, which runs
under PYTHONHASHSEED=0: a seed's history (and its hash) is the same in a worker as in
the command itself. Results come back in seed order, whatever order workers finish in.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Generator, Iterable

from embedlog.testing.limits import Limits
from embedlog.testing.sim import SeedResult, run_seed


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
) -> Generator[SeedResult, None, None]:
    """Each seed's result, in seed order; with ``jobs`` > 1 in that many processes.
    Closing the iterator early stops the workers."""
    work = [(s, scenario, unsafe, str(limits or ""), keep_trace, quiet, suppress) for s in seeds]
    if jobs <= 1 or len(work) <= 1:
        for job in work:
            yield _one(job)
        return
    with multiprocessing.get_context("spawn").Pool(min(jobs, len(work))) as pool:
        yield from pool.imap(_one, work, chunksize=1)
