"""``embedlog chaos``: run many seeds of the deterministic simulator and report.

Exits 0 when every seed held every invariant, 1 when one did not (printing the seed,
the violations, the end of its trace, where the whole trace was written and the
command that replays it), 2 on bad input.
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from embedlog.testing.decisions import SuppressError, parse_suppress
from embedlog.testing.limits import KNOBS, Limits, LimitsError
from embedlog.testing.scenarios import DEFAULT_SCENARIO, SCENARIOS, UNSAFE, choices
from embedlog.testing.shrink import replay_command

PROGRESS_EVERY = 10.0  # seconds between progress lines when stderr is no terminal
TRACE_TAIL = 60  # events of a failing seed printed inline (the whole trace goes to a file)

# Counts shown in the summary, in this order (others follow alphabetically).
_HEADLINE = (
    "fault.crash",
    "fault.clean_stop",
    "fault.restart",
    "net.request_lost",
    "net.answer_lost",
    "net.delay_spike",
    "net.timeout",
    "add.acked",
    "path.add_batch",
    "ensemble_change",
    "path.fence",
    "recovery.ok",
    "path.recovery_write_back",
    "bp46.phase_one",
    "bp46.repair_done",
)


def add_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "chaos",
        help="deterministic simulation: many seeded histories, invariants checked",
        description=(__doc__ or "").replace("``", ""),  # plain text, not reStructuredText
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # Counts and names are checked by hand: one line naming the problem, not a usage dump.
    p.add_argument("--seeds", help="how many seeds to run (a whole number >= 1)")
    p.add_argument("--start", default="0", help="the first seed (default 0)")
    p.add_argument(
        "--scenario",
        help=f"one of: {choices(SCENARIOS)} (default: {DEFAULT_SCENARIO}, or the one the "
        "--unsafe switch names)",
    )
    p.add_argument("--unsafe", help="restore one known-unsafe behaviour (see --list-unsafe)")
    p.add_argument("--list-unsafe", action="store_true", help="list the unsafe switches")
    p.add_argument("--list-scenarios", action="store_true", help="list the scenarios")
    p.add_argument(
        "--trace", action="store_true", help="print every seed's whole trace (for replays)"
    )
    p.add_argument(
        "--keep-going", action="store_true", help="run every seed even after a violation"
    )
    p.add_argument(
        "--jobs",
        help="seeds run at once, each in a worker process (default: the number of CPUs)",
    )
    p.add_argument(
        "--limit",
        help=f"bound what each seed draws, e.g. faults=3,entries=7 (knobs: {', '.join(KNOBS)});"
        " what a shrunk history's replay command gives",
    )
    p.add_argument(
        "--suppress",
        help="leave these numbered fault decisions out of the history, e.g. 3,17,40 (with "
        "--seeds 1): what a shrunk history's replay command gives",
    )
    p.add_argument(
        "--shrink",
        action="store_true",
        help="shrink every violating seed (default: the first one only)",
    )
    p.add_argument("--no-shrink", action="store_true", help="do not shrink violating seeds")
    p.set_defaults(func=run)


def _error(msg: str) -> int:
    print(f"embedlog chaos: error: {msg}", file=sys.stderr)
    return 2


def _whole(text: str | None, minimum: int) -> int | None:
    try:
        value = int(text) if text is not None else None
    except ValueError:
        value = None
    if value is None or value < minimum:
        return None
    return value


def run(args: argparse.Namespace) -> int:
    if args.list_unsafe:
        for u in UNSAFE.values():
            print(f"{u.name:30} {u.summary} (scenario {u.scenario})")
        return 0
    if args.list_scenarios:
        for s in SCENARIOS.values():
            print(f"{s.name:20} {s.summary}")
        return 0
    seeds = _whole(args.seeds, 1)
    if seeds is None:
        return _error(f"--seeds takes a whole number >= 1, got {args.seeds!r}")
    start = _whole(args.start, 0)
    if start is None:
        return _error(f"--start takes a whole number >= 0, got {args.start!r}")
    if args.scenario is None:
        switch = UNSAFE.get(args.unsafe) if args.unsafe is not None else None
        args.scenario = switch.scenario if switch is not None else DEFAULT_SCENARIO
    if args.scenario not in SCENARIOS:
        return _error(f"unknown scenario {args.scenario!r}; scenarios: {choices(SCENARIOS)}")
    if args.unsafe is not None and args.unsafe not in UNSAFE:
        return _error(f"unknown unsafe switch {args.unsafe!r}; switches: {choices(UNSAFE)}")
    if args.shrink and args.no_shrink:
        return _error("--shrink and --no-shrink exclude each other: give one")
    jobs = _whole(args.jobs, 1) if args.jobs is not None else (os.cpu_count() or 1)
    if jobs is None:
        return _error(f"--jobs takes a whole number >= 1, got {args.jobs!r}")
    try:
        limits = Limits.parse(args.limit) if args.limit is not None else Limits()
    except LimitsError as exc:
        return _error(str(exc))
    try:
        suppress = parse_suppress(args.suppress) if args.suppress is not None else frozenset()
    except SuppressError as exc:
        return _error(str(exc))
    if suppress and seeds != 1:
        return _error(f"--suppress names decisions of one history: give --seeds 1, not {seeds}")
    if os.environ.get("PYTHONHASHSEED") != "0":
        # Iteration over sets of strings follows the hash seed: a history replays exactly
        # only under the same one, so every chaos run uses 0.
        argv = list(getattr(args, "argv", None) or sys.argv[1:])
        env = dict(os.environ, PYTHONHASHSEED="0")
        return subprocess.call([sys.executable, "-m", "embedlog", *argv], env=env)
    # What is loaded by now lives as long as the process: frozen for the run, the collector
    # no longer walks it at each full collection, here or in the forked workers (where the
    # walk would also copy its pages).
    gc.freeze()
    try:
        return _run_seeds(args, start, seeds, jobs, limits, suppress)
    finally:
        gc.unfreeze()


def _run_seeds(
    args: argparse.Namespace,
    start: int,
    seeds: int,
    jobs: int,
    limits: Limits,
    suppress: frozenset[int],
) -> int:
    from embedlog.testing.parallel import run_seeds

    scenario, unsafe = args.scenario, args.unsafe
    print(
        f"embedlog chaos: scenario {scenario}"
        + (f", unsafe {unsafe}" if unsafe else "")
        + (f", limits {limits}" if limits else "")
        + (f", suppressed decisions {args.suppress}" if suppress else "")
        + f", seeds {start}..{start + seeds - 1}, {jobs} job{'s' if jobs > 1 else ''}",
        flush=True,
    )
    from embedlog.console import Progress

    # On stderr, so stdout is the report alone; without a terminal a line now and then
    # (and the last one), not one per seed in a CI log.
    progress = Progress("seeds", seeds, every=PROGRESS_EVERY)
    totals: Counter[str] = Counter()
    failed: list[int] = []
    began = time.perf_counter()
    results = run_seeds(
        range(start, start + seeds),
        scenario,
        unsafe=unsafe,
        limits=limits,
        jobs=jobs,
        keep_trace=args.trace,
        quiet=not args.verbose,
        suppress=suppress,
    )
    for n, result in enumerate(results, 1):
        seed = result.seed
        totals.update(result.counts)
        if args.trace:
            print("\n".join(result.trace))
            print(f"seed {seed}: trace hash {result.trace_hash}, {result.events} events")
        if not result.ok:
            progress.close()  # the report starts on a line of its own
            failed.append(seed)
            _report_failure(_with_trace(result, limits, not args.verbose, suppress))
            if args.shrink or (len(failed) == 1 and not args.no_shrink):
                _report_shrunk(result, limits, suppress)
            if not args.keep_going:
                results.close()  # stops the workers
                break
        progress.update(n, note=f"{len(failed)} violating")
    progress.update(n, note=f"{len(failed)} violating", force=True)
    progress.close()
    elapsed = time.perf_counter() - began
    ran = n
    print(f"ran {ran} seeds in {elapsed:.1f}s: {ran / elapsed:.1f} seeds/s")
    shown = [k for k in _HEADLINE if k in totals]
    shown += sorted(k for k in totals if k not in _HEADLINE)
    print("exercised: " + ", ".join(f"{k} {totals[k]}" for k in shown))
    if failed:
        print(f"VIOLATIONS in seed(s) {', '.join(map(str, failed))}")
        return 1
    print("no invariant violated")
    return 0


def _report_failure(result: object) -> None:
    from embedlog.testing.simtrace import SeedResult

    assert isinstance(result, SeedResult)
    out = Path(tempfile.gettempdir()) / (
        f"embedlog-chaos-{result.scenario}-{result.unsafe or 'safe'}-{result.seed}.trace"
    )
    out.write_text("\n".join(result.trace) + "\n")
    print(f"\nseed {result.seed} VIOLATED {len(result.violations)} invariant check(s):")
    for v in result.violations[:10]:
        print(f"  {v}")
    _show_until_violation(result.trace, "", result.events, result.trace_hash)
    print(f"whole trace: {out}")
    replay = replay_command(
        result.seed, result.scenario, result.unsafe, result.limits, result.suppress
    )
    print(f"replay: {replay}")


def _with_trace(
    result: object, limits: Limits, quiet: bool, suppress: frozenset[int] = frozenset()
) -> object:
    """The result again with its whole trace (workers keep none): the seed runs once more,
    which also shows it replays (the same hash)."""
    from embedlog.testing.sim import run_seed
    from embedlog.testing.simtrace import SeedResult

    assert isinstance(result, SeedResult)
    if result.trace:
        return result
    again = run_seed(
        result.seed,
        result.scenario,
        unsafe=result.unsafe,
        quiet=quiet,
        limits=limits or None,
        suppress=suppress,
    )
    if again.trace_hash != result.trace_hash:
        print(
            f"WARNING: seed {result.seed} did not replay: trace hash {again.trace_hash} "
            f"here, {result.trace_hash} in its first run"
        )
    return again


def _report_shrunk(result: object, limits: Limits, suppress: frozenset[int]) -> None:
    """Shrink a violating seed: first its limits (shrink.py; not when decisions are
    suppressed already, whose numbers the limits would change), then its fault decisions
    one group at a time (shrink_events.py); print the shrunk history and its replay."""
    from embedlog.testing.shrink import shrink
    from embedlog.testing.shrink_events import shrink_events
    from embedlog.testing.simtrace import SeedResult

    assert isinstance(result, SeedResult)
    print(f"shrinking seed {result.seed} ...", flush=True)
    invariant = result.violations[0].invariant
    if not suppress:
        by_limits = shrink(result.seed, result.scenario, result.unsafe, start=limits or None)
        invariant, limits = by_limits.invariant, by_limits.limits
        print(
            f"shrunk seed {result.seed} ({invariant}) in {by_limits.tries} runs: limits "
            f"{limits or 'none'}; {by_limits.events} trace events, of "
            f"{by_limits.original_events}",
            flush=True,
        )
    shrunk = shrink_events(
        result.seed,
        result.scenario,
        result.unsafe,
        limits=limits or None,
        invariant=invariant,
        start=suppress,
    )
    print(
        f"shrunk seed {result.seed}'s fault decisions ({shrunk.invariant}) in {shrunk.tries} "
        f"runs: {len(shrunk.decisions)} carried out, of {shrunk.original_decisions}; "
        f"{shrunk.events} trace events, of {shrunk.original_events}"
    )
    _print_shrunk_history(shrunk)
    print(f"replay shrunk: {shrunk.command()}")


def _print_shrunk_history(shrunk: object) -> None:
    """The shrunk history: the decisions it carries out, and its trace (run once more,
    which shows the replay is exact: the same hash)."""
    from embedlog.testing.shrink_events import EventsShrunk
    from embedlog.testing.sim import run_seed

    assert isinstance(shrunk, EventsShrunk)
    print(f"the shrunk history's {len(shrunk.decisions)} fault decisions:")
    for d in shrunk.decisions:
        print(f"  {d}")
    again = run_seed(
        shrunk.seed,
        shrunk.scenario,
        unsafe=shrunk.unsafe,
        limits=shrunk.limits or None,
        suppress=shrunk.suppress,
    )
    if again.trace_hash != shrunk.trace_hash:
        print(
            f"WARNING: the shrunk history did not replay: trace hash {again.trace_hash}, "
            f"{shrunk.trace_hash} while shrinking"
        )
    out = Path(tempfile.gettempdir()) / (
        f"embedlog-chaos-{shrunk.scenario}-{shrunk.unsafe or 'safe'}-{shrunk.seed}-shrunk.trace"
    )
    out.write_text("\n".join(again.trace) + "\n")
    _show_until_violation(again.trace, "shrunk history's ", again.events, again.trace_hash)
    print(f"whole shrunk trace: {out}")


def _show_until_violation(trace: list[str], whose: str, events: int, trace_hash: str) -> None:
    """The last TRACE_TAIL events up to the trace's first violation (or its end)."""
    last = len(trace) - 1
    first = next((i for i, line in enumerate(trace) if " VIOLATION " in line), last)
    shown = trace[max(0, first + 1 - TRACE_TAIL) : first + 1]
    print(
        f"the {whose}{len(shown)} trace events up to the first violation, of {events} "
        f"(trace hash {trace_hash}):"
    )
    for line in shown:
        print(f"  {line}")
