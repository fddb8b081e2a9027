"""What a simulated history costs, and whether a change kept every history
(docs/simulation.md, "Speed"), measured, not asserted.

1. CPU seconds per seed of each scenario (seeds 0..N-1 in one process, ``--jobs 1`` as
   ``embedlog chaos`` runs them), of this tree against an older one (``--before DIR``:
   e.g. ``git archive b638893 | tar x -C /tmp/before``), in alternating child processes
   so that the machine's load hits both alike.
2. ``--hashes FILE``: each seed's trace hash, recorded into FILE, or compared with it
   when it exists (every seed that differs is named). A speed change must keep every
   history: record on the code before it, compare after.
3. ``--jobs N``: also the rate issue #31 asks about, wall-clock seeds/s of
   ``embedlog chaos --jobs N`` over the same seeds, each tree's runs alternating (the
   best of ``--rounds``), with the load average before and after (another process on
   the machine slows both trees, not one).

Run: python benchmarks/bench_sim.py [--before DIR] [--seeds 20] [--scenario S ...]
         [--rounds 2] [--hashes FILE] [--jobs N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Run in a child process with the tree on its path: prints {"cpu": s, "hashes": {seed: h}}.
CHILD = """
import gc, json, sys, time
from embedlog.testing.sim import run_seed
scenario, seeds = sys.argv[1], int(sys.argv[2])
gc.freeze()  # as embedlog chaos does for its run
began = time.process_time()
hashes = {s: run_seed(s, scenario, keep_trace=False).trace_hash for s in range(seeds)}
print(json.dumps({"cpu": time.process_time() - began, "hashes": hashes}))
"""


def run(tree: Path, scenario: str, seeds: int) -> dict[str, object]:
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0")
    # In the tree: ``python -c`` puts its working directory first on the path, ahead of
    # PYTHONPATH, so a child started in another checkout would import that one instead.
    out = subprocess.run(
        [sys.executable, "-c", CHILD, scenario, str(seeds)],
        env=env,
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, object] = json.loads(out)
    return result


def chaos_rate(tree: Path, scenario: str, seeds: int, jobs: int) -> float:
    """Seeds/s as ``embedlog chaos`` reports it (its workers' start included)."""
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0")
    cmd = [sys.executable, "-m", "embedlog", "chaos", "--scenario", scenario]
    cmd += ["--seeds", str(seeds), "--jobs", str(jobs), "--no-shrink", "--keep-going"]
    out = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True).stdout
    ran = next(line for line in out.splitlines() if line.startswith("ran "))
    return float(ran.rsplit(": ", 1)[1].split()[0])


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from embedlog.testing.scenarios import SCENARIOS

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--before", type=Path, help="an older tree to compare with")
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--scenario", action="append", choices=list(SCENARIOS))
    p.add_argument("--rounds", type=int, default=2, help="alternating runs of each tree")
    p.add_argument("--hashes", type=Path, help="record into, or compare with, this file")
    p.add_argument("--jobs", type=int, help="also wall-clock seeds/s of chaos --jobs N")
    args = p.parse_args()
    scenarios = args.scenario or list(SCENARIOS)
    trees = [("this", ROOT)] + ([("before", args.before)] if args.before else [])
    recorded = json.loads(args.hashes.read_text()) if args.hashes and args.hashes.exists() else {}
    hashes: dict[str, dict[str, str]] = {}
    differ = 0
    for scenario in scenarios:
        best: dict[str, float] = {}
        for _ in range(args.rounds):
            for name, tree in trees:
                result = run(tree, scenario, args.seeds)
                cpu = float(result["cpu"])  # type: ignore[arg-type]
                best[name] = min(best.get(name, cpu), cpu)
                if name == "this":
                    hashes[scenario] = result["hashes"]  # type: ignore[assignment]
        line = f"{scenario:26} " + "  ".join(
            f"{name} {args.seeds / cpu:5.1f} CPU seeds/s" for name, cpu in best.items()
        )
        if args.jobs:
            load = os.getloadavg()[0]
            rate: dict[str, float] = {}
            for _ in range(args.rounds):
                for name, tree in trees:
                    r = chaos_rate(tree, scenario, args.seeds, args.jobs)
                    rate[name] = max(rate.get(name, r), r)
            line += f"\n{'':26} " + "  ".join(
                f"{name} {r:5.1f} seeds/s" for name, r in rate.items()
            )
            line += f" with --jobs {args.jobs} (load {load:.1f} -> {os.getloadavg()[0]:.1f})"
        for seed, h in sorted(recorded.get(scenario, {}).items(), key=lambda kv: int(kv[0])):
            if hashes[scenario].get(seed, h) != h:
                differ += 1
                line += f"\n  seed {seed}: history differs from {args.hashes}"
        print(line, flush=True)
    if args.hashes and not recorded:
        args.hashes.write_text(json.dumps(hashes, indent=1))
        print(f"trace hashes of seeds 0-{args.seeds - 1} recorded in {args.hashes}")
    elif args.hashes:
        print(f"{differ} seed(s) differ from {args.hashes}")


if __name__ == "__main__":
    main()
