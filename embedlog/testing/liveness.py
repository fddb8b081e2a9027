"""The simulator's liveness rule while the faults go on, ``OperationsReturn``.

Whatever the faults, each append, takeover, recovery, trim, commit and delete of the
workload returns, done or failed with an error, within the workload's time
(``WORKLOAD_LIMIT``, sim.py): a task still waiting then is a client left hanging (a
writer whose rollover waited for ever for an entry a bookie had refused: seed 6 of
``unbounded-streams``). A follower whose reads kept returning failures until lately
waits for the cluster, as a tail does (the race scenarios' faults can strike whichever
bookies it asks, as long as the workload lasts): it goes on, and must finish once the
cluster is healed and every ledger recovered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from attrs import frozen

from embedlog.testing.oracle import Oracle
from embedlog.testing.workload import judge_outcome

RULE = "OperationsReturn"
HEALED_LIMIT = 30.0  # virtual seconds a task retrying at the limit gets once healed


@frozen
class AtLimit:
    """The workload's tasks still running at its limit, judged."""

    hung: list[asyncio.Future[Any]]  # violated, to be cancelled
    retrying: list[asyncio.Future[Any]]  # waiting for the cluster: they go on


def judge_at_limit(
    oracle: Oracle,
    pending: set[asyncio.Future[Any]],
    retrying: Callable[[asyncio.Future[Any]], bool],
    limit: float,
) -> AtLimit:
    """``pending``: the tasks still running after ``limit`` virtual seconds; ``retrying``
    says which of them are retrying (``Workload.retrying``)."""
    hung = [t for t in pending if not retrying(t)]
    if hung:
        oracle.violate(
            RULE,
            f"{len(hung)} workload task(s) still waiting after {limit:.0f} virtual "
            f"seconds: {describe(hung)}",
        )
    return AtLimit(hung, [t for t in pending if t not in hung])


async def retrying_finish(oracle: Oracle, retrying: Sequence[asyncio.Future[Any]]) -> None:
    """Once healed, with every ledger recovered, the tasks that were retrying at the limit
    finish within ``HEALED_LIMIT``."""
    if not retrying:
        return
    _done, still = await asyncio.wait(retrying, timeout=HEALED_LIMIT)
    for t in still:
        t.cancel()
    if still:
        oracle.violate(
            RULE,
            f"{len(still)} workload task(s) retrying at the limit still waiting "
            f"{HEALED_LIMIT:.0f} virtual seconds after the cluster healed: {describe(still)}",
        )
    for t in retrying:
        if t not in still:
            judge_outcome(oracle, t)


def describe(tasks: Iterable[asyncio.Future[Any]]) -> str:
    return "; ".join(sorted(waiting_at(t) for t in tasks))


def waiting_at(task: asyncio.Future[Any]) -> str:
    """Where a task waits: its chain of coroutines, outermost first (function:line)."""
    coro: Any = task.get_coro() if isinstance(task, asyncio.Task) else None
    frames = []
    while getattr(coro, "cr_frame", None) is not None:
        frame = coro.cr_frame
        frames.append(f"{frame.f_code.co_qualname}:{frame.f_lineno}")
        coro = coro.cr_await  # a coroutine it awaits, or a future (the end of the chain)
    return " > ".join(frames) or repr(task)
