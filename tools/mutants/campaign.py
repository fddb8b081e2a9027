"""The mutant campaign (issue #31): does ``embedlog chaos`` catch bugs nobody tuned it for?

Each mutant (``mutants.toml``) is a small textual patch of the protocol code. For each,
the campaign exports the repository's HEAD into a scratch directory, applies the patch
(a snippet not found exactly once is a stale mutant: an error, never a silent skip),
checks that the mutated module still imports from that copy and that the mutant changes
behaviour (a seed's trace hash differs from the unmutated tree's), then runs ``embedlog
chaos`` on the mutant's scenario in that copy and stops at the first violating seed.

Everything runs in subprocesses with PYTHONPATH set to the copy: a mutant never touches
the working tree, and one that crashes the interpreter stops the campaign with its name.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path

from attrs import frozen

MUTANTS = Path(__file__).with_name("mutants.toml")
REPO = Path(__file__).resolve().parents[2]

_VIOLATED = re.compile(r"^seed (\d+) VIOLATED .*\n  (\w+):", re.M)


class CampaignError(Exception):
    """The campaign cannot go on (a stale mutant, a tree that does not export, a
    simulator that failed for another reason than a violated invariant)."""


@frozen
class Mutant:
    name: str
    file: str  # relative to the repository's root
    scenario: str
    description: str
    old: str  # must occur exactly once in ``file``
    new: str
    # A test (pytest node id) that fails on the mutant: what shows that a mutant changes
    # behaviour when no trace of the seeds run does.
    test: str = ""

    @property
    def module(self) -> str:
        return self.file.removesuffix(".py").replace("/", ".")


@frozen
class Outcome:
    """What the campaign found for one mutant."""

    mutant: Mutant
    changed: str  # how the mutant showed it changes behaviour, or "" (it did not)
    killed: bool
    seed: int | None  # the first violating seed
    invariant: str  # the first violation's invariant ("" when not killed)
    seeds_run: int
    seconds: float  # the chaos run's, up to its first violation


def load(path: Path = MUTANTS) -> list[Mutant]:
    """The mutants of a campaign file; names must be unique."""
    doc = tomllib.loads(path.read_text())
    mutants = []
    for n, entry in enumerate(doc.get("mutant", []), 1):
        try:
            mutants.append(Mutant(**entry))
        except TypeError as exc:
            fields = "name, file, scenario, description, old, new and optionally test"
            raise CampaignError(
                f"{path}: mutant {entry.get('name', n)}: {exc}; a mutant has {fields}"
            ) from None
    names = [m.name for m in mutants]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise CampaignError(f"{path}: mutant names used twice: {', '.join(dupes)}; rename them")
    return mutants


def export_head(repo: Path, dest: Path) -> None:
    """The repository's committed HEAD (nothing uncommitted) into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", "HEAD"], capture_output=True
    )
    if archive.returncode != 0:
        raise CampaignError(
            f"git archive HEAD of {repo} failed: {archive.stderr.decode().strip()}; "
            "run the campaign from a git checkout"
        )
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)


def apply(mutant: Mutant, tree: Path) -> None:
    """Patch ``tree`` with ``mutant``; CampaignError if its snippet is not there exactly once."""
    path = tree / mutant.file
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise CampaignError(
            f"mutant {mutant.name} is stale: {mutant.file} does not exist; update "
            f"{MUTANTS.name} to the code as it is now"
        ) from None
    count = text.count(mutant.old)
    if count != 1:
        raise CampaignError(
            f"mutant {mutant.name} is stale: its snippet occurs {count} times in "
            f"{mutant.file}, not once; update {MUTANTS.name} to the code as it is now"
        )
    path.write_text(text.replace(mutant.old, mutant.new))


def _chaos(scenario: str, seeds: int, jobs: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "embedlog",
        "chaos",
        "--scenario",
        scenario,
        "--seeds",
        str(seeds),
        "--jobs",
        str(jobs),
        "--no-shrink",
    ]


def _env(tree: Path) -> dict[str, str]:
    # PYTHONHASHSEED=0 as `embedlog chaos` sets it (it would re-execute itself otherwise).
    return dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0")


def check_import(mutant: Mutant, tree: Path) -> None:
    """The mutated module imports, from ``tree`` and not from another checkout."""
    code = f"import {mutant.module} as m; print(m.__file__)"
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=tree, env=_env(tree), capture_output=True, text=True
    )
    if run.returncode != 0:
        last = (run.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise CampaignError(f"mutant {mutant.name}: {mutant.module} does not import: {last}")
    where = Path(run.stdout.strip()).resolve()
    if not where.is_relative_to(tree.resolve()):
        raise CampaignError(
            f"mutant {mutant.name}: {mutant.module} was imported from {where}, not from the "
            f"scratch copy {tree}; unset whatever puts another checkout first on sys.path"
        )


# The simulator's own runner, in the copy: `embedlog chaos --trace` would print (and
# ship from its workers) every seed's whole trace to give its hash.
_HASHES = """
import sys
from embedlog.testing.parallel import run_seeds
for r in run_seeds(range(int(sys.argv[2])), sys.argv[1], jobs=int(sys.argv[3])):
    print(r.seed, r.trace_hash, flush=True)
"""


def trace_hashes(tree: Path, scenario: str, seeds: int, jobs: int = 1) -> list[str]:
    """The trace hash of each of the first ``seeds`` seeds of ``scenario`` in ``tree``."""
    run = subprocess.run(
        [sys.executable, "-c", _HASHES, scenario, str(seeds), str(jobs)],
        cwd=tree,
        env=_env(tree),
        capture_output=True,
        text=True,
    )
    hashes = [line.split()[1] for line in run.stdout.splitlines()]
    if run.returncode != 0 or len(hashes) != seeds:
        last = (run.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise CampaignError(
            f"the simulator's runner in {tree} exited {run.returncode} with {len(hashes)} of "
            f"{seeds} trace hashes: {last}"
        )
    return hashes


def first_difference(baseline: Sequence[str], mutated: Sequence[str]) -> str:
    """How the mutant changed behaviour ("trace of seed N"), or "" if no trace changed."""
    for seed, (a, b) in enumerate(zip(baseline, mutated, strict=True)):
        if a != b:
            return f"trace of seed {seed}"
    return ""


@frozen
class ChaosRun:
    killed: bool
    seed: int | None
    invariant: str
    seeds_run: int


def parse_chaos(returncode: int, stdout: str, stderr: str, seeds: int) -> ChaosRun:
    """What one `embedlog chaos` run (stopping at the first violation) found."""
    if returncode == 0:
        return ChaosRun(False, None, "", seeds)
    found = _VIOLATED.search(stdout)
    if returncode != 1 or found is None:
        last = (stderr.strip().splitlines() or stdout.strip().splitlines() or ["-"])[-1]
        raise CampaignError(f"embedlog chaos exited {returncode} without a violation: {last}")
    seed = int(found.group(1))
    ran = re.search(r"^ran (\d+) seeds", stdout, re.M)
    return ChaosRun(True, seed, found.group(2), int(ran.group(1)) if ran else seed + 1)


def fails_test(tree: Path, test: str) -> bool:
    """Whether pytest ``test`` fails in ``tree`` (CampaignError if it cannot be collected)."""
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", test],
        cwd=tree,
        env=_env(tree),
        capture_output=True,
        text=True,
    )
    if run.returncode not in (0, 1):
        last = (run.stdout.strip().splitlines() or ["(no output)"])[-1]
        raise CampaignError(f"pytest {test} in {tree} exited {run.returncode}: {last}")
    return run.returncode == 1


def run_chaos(tree: Path, scenario: str, seeds: int, jobs: int) -> ChaosRun:
    run = subprocess.run(
        _chaos(scenario, seeds, jobs),
        cwd=tree,
        env=_env(tree),
        capture_output=True,
        text=True,
    )
    return parse_chaos(run.returncode, run.stdout, run.stderr, seeds)


class Campaign:
    """Mutants run one after the other against one export of HEAD."""

    def __init__(
        self,
        repo: Path = REPO,
        *,
        seeds: int = 1000,
        jobs: int = 2,
        confirm_seeds: int = 20,
        scratch: Path | None = None,
        progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
    ) -> None:
        self.repo = repo
        self.seeds = seeds
        self.jobs = jobs
        self.confirm_seeds = confirm_seeds
        self.progress = progress
        self.scratch = Path(tempfile.mkdtemp(prefix="embedlog-mutants-", dir=scratch))
        self.pristine = self.scratch / "HEAD"
        export_head(repo, self.pristine)
        self._baseline: dict[str, list[str]] = {}

    def close(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self) -> Campaign:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def copy(self, mutant: Mutant) -> Path:
        """A fresh copy of HEAD with ``mutant`` applied."""
        tree = self.scratch / mutant.name
        shutil.rmtree(tree, ignore_errors=True)
        shutil.copytree(self.pristine, tree)
        apply(mutant, tree)
        return tree

    def baseline(self, scenario: str, seeds: int) -> list[str]:
        have = self._baseline.get(scenario, [])
        if len(have) < seeds:
            self.progress(f"  baseline: trace hashes of {seeds} seeds of {scenario} unmutated")
            have = trace_hashes(self.pristine, scenario, seeds, self.jobs)
            self._baseline[scenario] = have
        return have[:seeds]

    def changes(self, mutant: Mutant, tree: Path, seeds: int) -> str:
        """How ``mutant`` shows it changes behaviour in its first ``seeds`` seeds, or ""."""
        baseline = self.baseline(mutant.scenario, seeds)
        return first_difference(baseline, trace_hashes(tree, mutant.scenario, seeds, self.jobs))

    def run(self, mutant: Mutant) -> Outcome:
        tree = self.copy(mutant)
        try:
            check_import(mutant, tree)
            changed = self.changes(mutant, tree, self.confirm_seeds)
            self.progress(
                f"  {mutant.name}: "
                + (f"changes the {changed}" if changed else "no trace changed yet")
                + f"; chaos --scenario {mutant.scenario} --seeds {self.seeds}"
            )
            began = time.monotonic()
            chaos = run_chaos(tree, mutant.scenario, self.seeds, self.jobs)
            seconds = time.monotonic() - began
            if chaos.killed and not changed:
                changed = f"violation at seed {chaos.seed}"
            if not changed and self.seeds > self.confirm_seeds:
                # A survivor: is it equivalent to the code, or does the simulator miss it?
                self.progress(f"  {mutant.name}: trace hashes of all {self.seeds} seeds")
                changed = self.changes(mutant, tree, self.seeds)
            if not changed and mutant.test:
                self.progress(f"  {mutant.name}: pytest {mutant.test}")
                changed = f"fails {mutant.test}" if fails_test(tree, mutant.test) else ""
        finally:
            shutil.rmtree(tree, ignore_errors=True)
        return Outcome(
            mutant, changed, chaos.killed, chaos.seed, chaos.invariant, chaos.seeds_run, seconds
        )


def table(outcomes: Sequence[Outcome]) -> str:
    """The campaign's report: one row per mutant, then the kill ratio."""
    rows = [("mutant", "scenario", "killed?", "first seed", "invariant", "seconds", "changes")]
    for o in outcomes:
        rows.append(
            (
                o.mutant.name,
                o.mutant.scenario,
                "yes" if o.killed else "NO",
                "-" if o.seed is None else str(o.seed),
                o.invariant or "-",
                f"{o.seconds:.1f}",
                o.changed or "NOT CONFIRMED",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    confirmed = [o for o in outcomes if o.changed]
    killed = sum(o.killed for o in confirmed)
    if confirmed:
        lines.append(
            f"kill ratio: {killed}/{len(confirmed)} = {killed / len(confirmed):.0%} of the "
            "mutants shown to change behaviour"
        )
    unconfirmed = [o.mutant.name for o in outcomes if not o.changed]
    if unconfirmed:
        lines.append(f"not shown to change behaviour (left out): {', '.join(unconfirmed)}")
    return "\n".join(lines)
