"""``embedlog chaos``: exit codes, one-line errors, the failure report."""

from __future__ import annotations

import pytest

from embedlog.cli import main


@pytest.fixture(autouse=True)
def _hash_seed(monkeypatch):
    # Already the hash seed a chaos run re-executes itself under: run in this process.
    monkeypatch.setenv("PYTHONHASHSEED", "0")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--seeds", "0"], "--seeds takes a whole number >= 1, got '0'"),
        (["--seeds", "many"], "--seeds takes a whole number >= 1, got 'many'"),
        ([], "--seeds takes a whole number >= 1, got None"),
        (["--seeds", "1", "--start", "-1"], "--start takes a whole number >= 0"),
        (
            ["--seeds", "1", "--scenario", "nope"],
            "scenarios: bounded, bounded-corrupt, bounded-nojournal",
        ),
        (["--seeds", "1", "--unsafe", "nope"], "switches: ack-during-replacement, ack-from-"),
        (["--seeds", "1", "--jobs", "0"], "--jobs takes a whole number >= 1, got '0'"),
        (["--seeds", "1", "--limit", "nope=1"], "limits: ledgers, recoveries, entries, faults"),
        (["--seeds", "1", "--limit", "faults=x"], "limit faults takes a whole number >= 0"),
        (["--seeds", "1", "--limit", "entries=0"], "limit entries takes a whole number >= 1"),
        (["--seeds", "1", "--limit", "loss=1"], "limit loss takes only 0 (none)"),
        (["--seeds", "1", "--limit", "faults"], "--limit takes knob=value pairs"),
        (["--seeds", "1", "--shrink", "--no-shrink"], "exclude each other"),
        (["--seeds", "1", "--suppress", "3,x"], "--suppress takes decision numbers >= 0"),
        (["--seeds", "1", "--suppress", ""], "--suppress takes decision numbers >= 0"),
        (["--seeds", "2", "--suppress", "3"], "give --seeds 1, not 2"),
    ],
)
def test_bad_input_is_one_line_naming_the_valid_choices(argv, says, capsys):
    assert main(["chaos", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("embedlog chaos: error: ")
    assert says in err


def test_list_unsafe_names_every_switch(capsys):
    assert main(["chaos", "--list-unsafe"]) == 0
    out = capsys.readouterr().out
    for name in (
        "no-limbo",
        "no-fence-on-boot",
        "recovery-reads-without-fence",
        "recovery-from-minus-one",
        "ack-from-replaced-bookie",
        "no-truncate-noop",
        "unknown-as-negative",
        "dirty-entries-outside-noop-write-set",
        "limbo-clears-at-first-resend",
        "ack-during-replacement",
        "recovery-ignores-term",
        "forget-deletions",
    ):
        assert name in out


def test_clean_seeds_exit_0_with_rate_and_counts(capsys):
    assert main(["chaos", "--seeds", "3", "--start", "5"]) == 0
    out, err = capsys.readouterr()
    assert "3/3 seeds" in err and "seeds/s" in out  # the progress bar on stderr
    assert "fault.crash" in out and "no invariant violated" in out


def test_a_violation_exits_1_with_seed_trace_and_replay_command(capsys):
    assert main(["chaos", "--seeds", "20", "--unsafe", "no-limbo", "--no-shrink"]) == 1
    out = capsys.readouterr().out
    assert "VIOLATED" in out and "NoNegativeForAckedEntry" in out
    seed = int(out.split("seed ")[1].split()[0])
    replay = f"embedlog chaos --seeds 1 --start {seed} --scenario bounded-nojournal"
    assert f"replay: {replay} --unsafe no-limbo --trace" in out
    assert "trace events up to the first violation" in out


def test_the_first_violating_seed_is_shrunk_with_a_replay_command(capsys):
    argv = ["--seeds", "1", "--start", "26", "--unsafe", "ack-from-replaced-bookie", "--jobs", "1"]
    assert main(["chaos", *argv]) == 1
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("shrunk seed 26"))
    shrunk, original = (int(x) for x in line.split("; ")[1].split(" trace events, of "))
    assert shrunk < original
    replay = next(x for x in out.splitlines() if x.startswith("replay shrunk: "))
    assert replay.startswith(
        "replay shrunk: embedlog chaos --seeds 1 --start 26 --scenario bounded "
        "--unsafe ack-from-replaced-bookie --limit "
    )


def test_two_jobs_give_the_same_counts_and_exit_code_as_one(capsys):
    outs = []
    for jobs in ("1", "2"):
        assert main(["chaos", "--seeds", "3", "--start", "40", "--jobs", jobs]) == 0
        out = capsys.readouterr().out
        outs.append(next(x for x in out.splitlines() if x.startswith("exercised: ")))
    assert outs[0] == outs[1]
