"""Event-level shrinking: leave single fault decisions out of a failing history.

Every fault and leavable workload step of a history is a numbered decision
(decisions.py); a suppression set replays the seed with some of them ignored, their
draws made all the same. Shrinking searches for a set under which the seed still
violates the same invariant while the history carries out fewer decisions, in the
manner of delta debugging: groups of the carried decisions are left out, half of them
at first, then smaller groups, down to one at a time, scanning from the first decision
to the last. A history up to its first suppressed decision is the original one, so a
left-to-right scan keeps the meaning of what it already left out; a later pass (or a
group left out before earlier kept ones) may renumber later decisions, which is no
harm: a set is only kept after a run proved it still fails, and the seed, the limits
and the set replay that history exactly. A trial counts only when it carries out
strictly fewer decisions than the best history so far, so shrinking ends, and the
number of runs is bounded (``max_runs``).
"""

from __future__ import annotations

from collections.abc import Callable

from attrs import frozen

from embedlog.testing.decisions import Decision, format_suppress
from embedlog.testing.limits import Limits
from embedlog.testing.shrink import fails_alike, replay_command
from embedlog.testing.sim import run_seed
from embedlog.testing.simtrace import SeedResult

Runner = Callable[[frozenset[int]], SeedResult]

MAX_RUNS = 150  # seeds run at most while shrinking one history (its first run included)


@frozen
class EventsShrunk:
    seed: int
    scenario: str
    unsafe: str | None
    invariant: str
    limits: Limits
    suppress: frozenset[int]
    decisions: tuple[Decision, ...]  # carried out by the shrunk history
    original_decisions: int
    events: int  # trace events of the shrunk history
    original_events: int
    trace_hash: str  # of the shrunk history
    tries: int

    def command(self) -> str:
        suppress = format_suppress(self.suppress) if self.suppress else ""
        return replay_command(self.seed, self.scenario, self.unsafe, str(self.limits), suppress)


def next_position(carried: list[int], group: list[int]) -> int:
    """Where a scan goes on once ``group`` was left out: at the first carried decision of
    the new history (``carried``, its numbers in order) past the group's first number.
    Decisions before the group are the same in both histories."""
    return sum(1 for n in carried if n < group[0])


def shrink_events(
    seed: int,
    scenario: str,
    unsafe: str | None = None,
    *,
    limits: Limits | None = None,
    invariant: str | None = None,
    start: frozenset[int] = frozenset(),
    runner: Runner | None = None,
    max_runs: int = MAX_RUNS,
    progress: Callable[[frozenset[int], bool], None] | None = None,
) -> EventsShrunk:
    """A suppression set under which ``seed`` (under ``limits``, from ``start``) still
    violates ``invariant`` (default: its first violation's) with as few fault decisions
    carried out as the search found. Raises ValueError when the seed does not fail."""

    def default_runner(suppress: frozenset[int]) -> SeedResult:
        return run_seed(
            seed, scenario, unsafe=unsafe, keep_trace=False, limits=limits, suppress=suppress
        )

    run = runner or default_runner
    base = run(start)
    if base.ok:
        raise ValueError(f"seed {seed} of {scenario} violates no invariant: nothing to shrink")
    target = invariant or base.violations[0].invariant
    if not fails_alike(base, target):
        raise ValueError(f"seed {seed} of {scenario} does not violate {target}")
    best, current, tries = base, start, 1
    chunk = max(1, len(best.decisions) // 2)
    while tries < max_runs and best.decisions:
        changed, pos = False, 0
        while tries < max_runs:
            carried = [d.index for d in best.decisions]
            group = carried[pos : pos + chunk]
            if not group:
                break
            trial = current | frozenset(group)
            result = run(trial)
            tries += 1
            ok = fails_alike(result, target) and len(result.decisions) < len(best.decisions)
            if progress is not None:
                progress(trial, ok)
            if ok:
                best, current, changed = result, trial, True
                pos = next_position([d.index for d in best.decisions], group)
            else:
                pos += chunk
        if chunk == 1 and not changed:
            break
        chunk = max(1, chunk // 2)
    return EventsShrunk(
        seed=seed,
        scenario=scenario,
        unsafe=unsafe,
        invariant=target,
        limits=limits or Limits(),
        suppress=current,
        decisions=tuple(best.decisions),
        original_decisions=len(base.decisions),
        events=best.events,
        original_events=base.events,
        trace_hash=best.trace_hash,
        tries=tries,
    )
