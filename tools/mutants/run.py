"""Run the mutant campaign: ``python tools/mutants/run.py [--seeds 1000] [--jobs 2]
[--only NAME]`` (docs/simulation.md, "Mutant campaign").

Prints a table (mutant, scenario, killed?, first violating seed, seconds) and the kill
ratio on stdout, progress on stderr. Exits 0 when it ran every mutant asked for, 2 when
one could not run (a stale mutant, a copy whose module does not import).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.mutants.campaign import (
    MUTANTS,
    REPO,
    Campaign,
    CampaignError,
    Mutant,
    Outcome,
    apply,
    load,
    table,
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tools/mutants/run.py", description=__doc__)
    p.add_argument("--seeds", type=int, default=1000, help="seeds per mutant (default 1000)")
    p.add_argument("--jobs", type=int, default=2, help="seeds run at once (default 2)")
    p.add_argument(
        "--only", action="append", metavar="NAME", help="run this mutant (may be repeated)"
    )
    p.add_argument("--mutants", type=Path, default=MUTANTS, help="the campaign file")
    p.add_argument("--repo", type=Path, default=REPO, help="the repository whose HEAD to test")
    p.add_argument(
        "--confirm-seeds",
        type=int,
        default=20,
        help="seeds whose trace hashes show that a mutant changes behaviour (default 20)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="only check that every mutant applies to the working tree (none is stale)",
    )
    args = p.parse_args(argv)
    if args.seeds < 1 or args.jobs < 1 or args.confirm_seeds < 1:
        p.error("--seeds, --jobs and --confirm-seeds take whole numbers >= 1")
    try:
        mutants = load(args.mutants)
    except CampaignError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except tomllib.TOMLDecodeError as exc:
        print(f"error: {args.mutants} is not valid TOML: {exc}; fix it", file=sys.stderr)
        return 2
    if args.only:
        unknown = sorted(set(args.only) - {m.name for m in mutants})
        if unknown:
            names = ", ".join(m.name for m in mutants)
            print(f"error: no mutant named {', '.join(unknown)}; mutants: {names}", file=sys.stderr)
            return 2
        mutants = [m for m in mutants if m.name in args.only]
    if args.check:
        return _check(mutants, args.repo)
    rev = ["git", "-C", str(args.repo), "rev-parse", "--short", "HEAD"]
    head = subprocess.run(rev, capture_output=True, text=True).stdout.strip()
    print(f"mutant campaign of HEAD {head or '?'}: {len(mutants)} mutants, {args.seeds} seeds each")
    outcomes: list[Outcome] = []
    try:
        with Campaign(
            args.repo, seeds=args.seeds, jobs=args.jobs, confirm_seeds=args.confirm_seeds
        ) as campaign:
            for n, mutant in enumerate(mutants, 1):
                print(f"[{n}/{len(mutants)}] {mutant.name}: {mutant.description}", file=sys.stderr)
                outcome = campaign.run(mutant)
                outcomes.append(outcome)
                verdict = (
                    f"killed at seed {outcome.seed} ({outcome.invariant})"
                    if outcome.killed
                    else f"SURVIVED {outcome.seeds_run} seeds"
                )
                print(f"  {verdict} in {outcome.seconds:.1f}s", file=sys.stderr, flush=True)
    except CampaignError as exc:
        if outcomes:
            print(table(outcomes))
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(table(outcomes))
    return 0


def _check(mutants: list[Mutant], repo: Path) -> int:
    """Apply each mutant to a copy of its file: report the stale ones."""
    stale = 0
    for m in mutants:
        with tempfile.TemporaryDirectory() as tmp:
            target = Path(tmp) / m.file
            target.parent.mkdir(parents=True)
            source = repo / m.file
            if source.exists():
                target.write_text(source.read_text())
            try:
                apply(m, Path(tmp))
            except CampaignError as exc:
                stale += 1
                print(f"error: {exc}", file=sys.stderr)
    print(f"{len(mutants) - stale} of {len(mutants)} mutants apply")
    return 2 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
