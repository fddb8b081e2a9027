"""Shrinking a failing seed: the smallest limits (limits.py) under which it still fails.

Knob by knob, the shrinker tries ceilings from the smallest up and keeps the first one
under which the seed still violates the same invariant, then goes on to the next knob
with that one kept; a second pass tries again what the first could not cut (a later
knob can make an earlier one removable). What it returns replays with
``--seeds 1 --start S --limit ...``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from attrs import frozen

from embedlog.testing.limits import Limits
from embedlog.testing.scenarios import SCENARIOS
from embedlog.testing.sim import run_seed
from embedlog.testing.simtrace import SeedResult

# The order knobs are cut in: whole sources of trouble first, then counts.
ORDER = ("loss", "spikes", "ledgers", "recoveries", "faults", "meta", "entries")
_LADDER = (0, 1, 2, 3, 5, 8, 13, 21, 34, 55)

_NEMESIS = ("fault.crash", "fault.clean_stop", "fault.restart")
_META = (
    "fault.meta_slow",
    "fault.meta_error",
    "fault.meta_applied_error",
    "fault.session_expired",
)

Runner = Callable[[Limits], SeedResult]


@frozen
class Shrunk:
    seed: int
    scenario: str
    unsafe: str | None
    invariant: str
    limits: Limits
    events: int  # of the shrunk history
    original_events: int
    tries: int

    def command(self) -> str:
        return replay_command(self.seed, self.scenario, self.unsafe, str(self.limits))


def replay_command(
    seed: int, scenario: str, unsafe: str | None, limits: str = "", suppress: str = ""
) -> str:
    """The ``embedlog chaos`` command that replays one history exactly."""
    cmd = f"embedlog chaos --seeds 1 --start {seed} --scenario {scenario}"
    cmd += f" --unsafe {unsafe}" if unsafe else ""
    cmd += f" --limit {limits}" if limits else ""
    return cmd + (f" --suppress {suppress}" if suppress else "") + " --trace"


def fails_alike(result: SeedResult, invariant: str) -> bool:
    return any(v.invariant == invariant for v in result.violations)


def candidates(knob: str, ceiling: int) -> Iterable[int]:
    """Ceilings to try for ``knob``, smallest first, all below ``ceiling`` (what the
    history used without a limit on it)."""
    if knob in ("loss", "spikes"):
        return (0,) if ceiling > 0 else ()
    floor = 1 if knob in ("ledgers", "entries") else 0
    return [c for c in _LADDER if floor <= c < ceiling]


def used(result: SeedResult, knob: str, scenario: str) -> int:
    """How much of ``knob`` a history used: the ceiling below which cutting can begin."""
    sc = SCENARIOS[scenario]
    if knob == "faults":
        return sum(result.counts.get(k, 0) for k in _NEMESIS)
    if knob == "meta":
        return sum(result.counts.get(k, 0) for k in _META)
    if knob == "loss":
        return 1 if sc.loss[1] > 0 else 0
    if knob == "spikes":
        return 1 if sc.spikes[1] > 0 else 0
    return {"ledgers": sc.ledgers[1], "recoveries": sc.recoveries[1], "entries": sc.entries[1]}[
        knob
    ]


def shrink(
    seed: int,
    scenario: str,
    unsafe: str | None = None,
    *,
    invariant: str | None = None,
    start: Limits | None = None,
    runner: Runner | None = None,
    progress: Callable[[Limits, bool], None] | None = None,
) -> Shrunk:
    """The smallest limits under which ``seed`` still violates ``invariant`` (default:
    its first violation's). Raises ValueError when the seed does not fail at all."""

    def default_runner(limits: Limits) -> SeedResult:
        return run_seed(seed, scenario, unsafe=unsafe, keep_trace=False, limits=limits)

    run = runner or default_runner
    current = start or Limits()
    base = run(current)
    if base.ok:
        raise ValueError(f"seed {seed} of {scenario} violates no invariant: nothing to shrink")
    target = invariant or base.violations[0].invariant
    if not fails_alike(base, target):
        raise ValueError(f"seed {seed} of {scenario} does not violate {target}")
    best, tries = base, 0
    for _pass in range(2):
        changed = False
        for knob in ORDER:
            ceiling = current.get(knob)
            if ceiling is None:
                ceiling = used(best, knob, scenario)
            for value in candidates(knob, ceiling):
                trial = current.with_(knob, value)
                result = run(trial)
                tries += 1
                ok = fails_alike(result, target)
                if progress is not None:
                    progress(trial, ok)
                if ok:
                    current, best, changed = trial, result, True
                    break
        if not changed:
            break
    return Shrunk(
        seed=seed,
        scenario=scenario,
        unsafe=unsafe,
        invariant=target,
        limits=current,
        events=best.events,
        original_events=base.events,
        tries=tries,
    )
