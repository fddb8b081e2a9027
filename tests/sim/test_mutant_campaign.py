"""tools/mutants: the mutant campaign's own machinery (never the whole campaign here).

A mutant applied to a scratch copy of HEAD changes that copy alone; a snippet that is not
there exactly once is refused as stale; and one mutant the simulator kills within a few
seeds goes through the whole tool end to end (copy, import, trace hashes, chaos, table).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.mutants.campaign import (
    MUTANTS,
    REPO,
    CampaignError,
    Mutant,
    apply,
    export_head,
    load,
    parse_chaos,
)

# Killed within a few seeds of `bounded` (seed 5 when it was written): recovery closes
# a ledger at an entry two bookies of three hold, one explicit negative being enough.
QUICK_KILL = "recovery-closes-one-negative-short"
FRESH = MUTANTS.parent / "fresh.toml"  # the second round (docs/simulation.md)


def _by_name(name: str) -> Mutant:
    return next(m for m in load() if m.name == name)


def test_every_mutant_is_a_patch_of_protocol_code() -> None:
    mutants = load()
    assert len(mutants) >= 15
    for m in mutants:
        assert m.old != m.new, m.name
        assert m.file.split("/")[1] in ("ledger", "bookie", "unbounded"), m.name
        assert m.scenario and m.description, m.name
    # Spread over the three layers of the protocol, as issue #31 asks.
    assert {m.file.split("/")[1] for m in mutants} == {"ledger", "bookie", "unbounded"}


@pytest.mark.parametrize("campaign", [MUTANTS, FRESH])
def test_every_mutant_still_applies_to_the_tree(campaign: Path) -> None:
    """A refactor that moves a mutant's snippet makes the campaign stop at that mutant:
    found here, where the move is made, not when the campaign next runs."""
    mutants = load(campaign)
    stale = [m.name for m in mutants if (REPO / m.file).read_text().count(m.old) != 1]
    assert not stale, f"mutants whose snippet is not in their file exactly once: {stale}"
    assert len({m.name for m in mutants}) == len(mutants), "two mutants share a name"


def test_apply_patches_the_scratch_copy_only(tmp_path: Path) -> None:
    export_head(REPO, tmp_path)
    mutant = _by_name(QUICK_KILL)
    exported = (tmp_path / mutant.file).read_text()
    working = (REPO / mutant.file).read_text()
    apply(mutant, tmp_path)
    patched = (tmp_path / mutant.file).read_text()
    assert mutant.new in patched and mutant.old not in patched
    assert patched == exported.replace(mutant.old, mutant.new)
    assert (REPO / mutant.file).read_text() == working  # the working tree is untouched


def test_a_stale_snippet_is_refused(tmp_path: Path) -> None:
    export_head(REPO, tmp_path)
    real = _by_name(QUICK_KILL)
    exported = (tmp_path / real.file).read_text()
    gone = Mutant("gone", real.file, real.scenario, "-", real.old + "  # gone", real.new)
    with pytest.raises(CampaignError, match="mutant gone is stale: its snippet occurs 0 times"):
        apply(gone, tmp_path)
    twice = Mutant("twice", real.file, real.scenario, "-", "return", "return")
    with pytest.raises(CampaignError, match="mutant twice is stale: its snippet occurs"):
        apply(twice, tmp_path)
    missing = Mutant("moved", "embedlog/ledger/nowhere.py", real.scenario, "-", "x", "y")
    with pytest.raises(CampaignError, match=r"nowhere\.py does not exist"):
        apply(missing, tmp_path)
    assert (tmp_path / real.file).read_text() == exported  # a refused patch changes nothing


def test_a_stale_mutant_stops_the_command_with_its_name(tmp_path: Path) -> None:
    real = _by_name(QUICK_KILL)
    campaign = tmp_path / "stale.toml"
    campaign.write_text(
        "[[mutant]]\n"
        'name = "stale-one"\n'
        f'file = "{real.file}"\n'
        'scenario = "bounded"\n'
        'description = "a snippet nobody wrote"\n'
        'old = "this text is not in the file"\n'
        'new = "x"\n'
    )
    run = subprocess.run(
        [sys.executable, str(REPO / "tools/mutants/run.py"), "--mutants", str(campaign), "--check"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2
    assert "mutant stale-one is stale" in run.stderr


def test_chaos_output_is_read_for_the_first_violating_seed() -> None:
    out = (
        "embedlog chaos: scenario bounded, seeds 0..99, 2 jobs\n\n"
        "seed 7 VIOLATED 2 invariant check(s):\n"
        "  AckedByAckQuorum: entry 1:4 was acknowledged with 1 acks\n"
        "  NoDivergenceBetweenClientAndMetaData: ledger 1 closed at 3\n"
        "ran 8 seeds in 1.0s: 8.0 seeds/s\n"
        "VIOLATIONS in seed(s) 7\n"
    )
    run = parse_chaos(1, out, "", 100)
    assert (run.killed, run.seed, run.invariant, run.seeds_run) == (
        True,
        7,
        "AckedByAckQuorum",
        8,
    )
    clean = parse_chaos(0, "no invariant violated\n", "", 100)
    assert (clean.killed, clean.seed, clean.seeds_run) == (False, None, 100)
    with pytest.raises(CampaignError, match="exited 2 without a violation: error: bad"):
        parse_chaos(2, "", "error: bad\n", 100)


def test_a_mutant_is_killed_end_to_end(tmp_path: Path) -> None:
    run = subprocess.run(
        [
            sys.executable,
            str(REPO / "tools/mutants/run.py"),
            *("--only", QUICK_KILL, "--seeds", "20", "--jobs", "1", "--confirm-seeds", "1"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},  # where its scratch copies go
    )
    assert run.returncode == 0, run.stderr
    header, row, ratio = run.stdout.splitlines()[-3:]
    assert header.split()[:4] == ["mutant", "scenario", "killed?", "first"]
    name, scenario, killed, seed, invariant, _seconds, *changed = row.split()
    assert (name, scenario, killed) == (QUICK_KILL, "bounded", "yes")
    assert int(seed) < 20 and invariant != "-"  # the first violating seed, and what saw it
    assert changed and changed != ["NOT", "CONFIRMED"]  # shown to change behaviour
    assert ratio.startswith("kill ratio: 1/1 = 100%")
    assert f"[1/1] {QUICK_KILL}" in run.stderr  # progress goes to stderr
    assert "baseline" in run.stderr
    # The scratch copies are gone (chaos leaves the violating seed's trace file there).
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("embedlog-mutants-")]
