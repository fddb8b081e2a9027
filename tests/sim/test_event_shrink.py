"""Numbered fault decisions, their suppression, and event-level shrinking."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from embedlog.cli import main
from embedlog.testing.decisions import Decisions, SuppressError, format_suppress, parse_suppress
from embedlog.testing.shrink_events import next_position, shrink_events
from embedlog.testing.sim import run_seed


@pytest.fixture(autouse=True)
def _hash_seed(monkeypatch):
    monkeypatch.setenv("PYTHONHASHSEED", "0")  # chaos runs in this process


@pytest.mark.parametrize(
    ("text", "numbers"),
    [("3", {3}), ("3,17,40", {3, 17, 40}), (" 40 , 3 ", {3, 40}), ("0,0", {0})],
)
def test_parse_suppress(text, numbers):
    assert parse_suppress(text) == frozenset(numbers)
    assert parse_suppress(format_suppress(numbers)) == frozenset(numbers)


@pytest.mark.parametrize("text", ["", "x", "3,", "-1", "1.5", "3;4"])
def test_parse_suppress_refuses_what_is_no_list_of_numbers(text):
    with pytest.raises(SuppressError, match="--suppress takes decision numbers >= 0"):
        parse_suppress(text)


def test_decisions_are_numbered_and_the_suppressed_ones_ignored():
    traced: list[tuple[object, ...]] = []
    counts: Counter[str] = Counter()
    decide = Decisions(lambda: 1.5, lambda *e: traced.append(e), counts, frozenset({1}))
    assert [decide("crash", "b1"), decide("stop", "b2"), decide("wipe", "b3")] == [
        True,
        False,
        True,
    ]
    assert [str(d) for d in decide.carried()] == ["#0 1.5000000 crash b1", "#2 1.5000000 wipe b3"]
    assert traced == [("suppressed", 1, "stop", "b2")] and counts["suppressed"] == 1


@pytest.mark.parametrize(
    ("carried", "group", "pos"),
    [
        ([0, 1, 2, 7, 9], [3, 4, 5], 3),  # the group is gone: go on at 7
        ([4, 8], [1, 2], 0),
        ([0, 1, 2], [5], 3),  # past the end: the pass is over
    ],
)
def test_next_position(carried, group, pos):
    assert next_position(carried, group) == pos


def test_suppressing_a_decision_keeps_the_history_before_it_and_nothing_else_changes_it():
    seed, scenario = 1, "bounded-nojournal"
    whole = run_seed(seed, scenario)
    decisions = whole.decisions
    assert len(decisions) > 20
    # A number no decision has: the very same history.
    beyond = run_seed(seed, scenario, suppress=frozenset({len(decisions) + 10_000}))
    assert beyond.trace_hash == whole.trace_hash
    # Leave out the 11th decision: everything before it happens as it did.
    cut = decisions[10]
    part = run_seed(seed, scenario, suppress=frozenset({cut.index}))
    at = next(i for i, line in enumerate(part.trace) if " suppressed " in line)
    assert part.trace[at].endswith(f"suppressed {cut.index} {cut.kind} {' '.join(cut.detail)}")
    assert part.trace[:at] == whole.trace[:at]
    assert [d.index for d in part.decisions[:10]] == [d.index for d in decisions[:10]]
    assert cut.index not in {d.index for d in part.decisions}


@pytest.mark.parametrize(
    ("seed", "scenario", "switch", "runs"),
    [(19, "bounded", "unknown-as-negative", 150), (9, "bounded-nojournal", "no-limbo", 40)],
)
def test_shrinking_leaves_out_fault_decisions_and_keeps_the_violation(seed, scenario, switch, runs):
    original = run_seed(seed, scenario, unsafe=switch, keep_trace=False)
    target = original.violations[0].invariant
    shrunk = shrink_events(seed, scenario, switch, max_runs=runs)
    assert shrunk.invariant == target and shrunk.tries <= runs
    assert shrunk.original_decisions == len(original.decisions)
    assert len(shrunk.decisions) < len(original.decisions) and shrunk.suppress
    again = run_seed(seed, scenario, unsafe=switch, keep_trace=False, suppress=shrunk.suppress)
    assert target in [v.invariant for v in again.violations]
    assert again.trace_hash == shrunk.trace_hash
    assert [d.index for d in again.decisions] == [d.index for d in shrunk.decisions]


def _trace_hash(out: str) -> str:
    return re.findall(r"seed \d+: trace hash (\w+)", out)[-1]


def test_chaos_prints_the_shrunk_history_and_a_command_that_replays_exactly_it(capsys):
    argv = ["chaos", "--seeds", "1", "--start", "19", "--unsafe", "unknown-as-negative"]
    assert main([*argv, "--jobs", "1"]) == 1
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "'s fault decisions (" in x)
    kept, of = map(int, re.search(r"(\d+) carried out, of (\d+)", line).groups())
    assert kept < of
    listed = out.split("the shrunk history's")[1].splitlines()[1 : kept + 1]
    assert len(listed) == kept and all(re.match(r"  #\d+ \d+\.\d+ \w", x) for x in listed)
    assert "whole shrunk trace: " in out
    shown = r"history's \d+ trace events up to the first violation, of \d+ \(trace hash (\w+)\)"
    shown_hash = re.search(shown, out)[1]
    replay = next(x for x in out.splitlines() if x.startswith("replay shrunk: "))
    command = replay.removeprefix("replay shrunk: embedlog ").split()
    assert "--suppress" in command and command[-1] == "--trace"
    hashes = []
    for _ in range(2):
        assert main([*command, "--no-shrink"]) == 1
        replayed = capsys.readouterr().out
        assert "NoDivergenceBetweenClientAndMetaData" in replayed
        hashes.append(_trace_hash(replayed))
    assert hashes == [shown_hash, shown_hash]
