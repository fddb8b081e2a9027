"""Rounds of a benchmark alternating between trees: the work tree and other commits'.

Each round of each tree runs in a process of its own (the benchmark's script with
``--one-round DIR [args]``, which prints one JSON object as its last line), with that
tree first on ``PYTHONPATH``. The order of the trees flips from round to round, so that
the machine's drift over minutes hits all of them alike.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

Columns = dict[str, list[dict[str, float]]]


def export(rev: str, into: Path) -> Path:
    """``rev``'s tree (embedlog only) in ``into``, via git archive."""
    tar = into / "tree.tar"
    with tar.open("wb") as f:
        subprocess.run(["git", "archive", rev, "embedlog"], cwd=REPO, stdout=f, check=True)
    with tarfile.open(tar) as t:
        t.extractall(into / "tree", filter="data")
    return into / "tree"


def one_round(script: Path, tree: Path | None, directory: Path, *args: str) -> dict[str, float]:
    """One round of ``script`` on ``tree`` (None: this repository), in ``directory``."""
    env = dict(os.environ, PYTHONPATH=str(tree if tree is not None else REPO))
    out = subprocess.run(
        [sys.executable, str(script), "--one-round", str(directory), *args],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def alternate(
    script: Path, revs: list[str], rounds: int, *args: str, worktree: bool = True
) -> tuple[Columns, list[float]]:
    """``rounds`` rounds of ``script`` on each of ``revs`` (and the work tree), alternating:
    the figures of each tree's rounds, and the load averages seen along the way."""
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as d:
        base = Path(d)
        trees: dict[str, Path | None] = {}
        for n, rev in enumerate(revs):
            (base / f"rev{n}").mkdir()
            trees[rev] = export(rev, base / f"rev{n}")
        if worktree:
            trees["this tree"] = None
        columns: Columns = {name: [] for name in trees}
        for i in range(rounds):
            order = list(trees.items())
            if i % 2:
                order.reverse()
            for name, tree in order:
                work = base / f"round-{i}-{name.replace(' ', '-')}"
                work.mkdir()
                columns[name].append(one_round(script, tree, work, *args))
                load.append(os.getloadavg()[0])
                print(f"round {i + 1}/{rounds} {name}: done", file=sys.stderr)
    return columns, load
