"""The periodic auditor: passes on schedule, repairs what a pass finds, survives bad passes."""

from __future__ import annotations

import pytest
from auditor_helpers import replace_disks, write_closed

from embedlog.auditor import PeriodicAuditor
from embedlog.auditor.replication import Replicator
from embedlog.auditor.rules import assigned_entries
from embedlog.cli import main


def test_a_wiped_bookie_is_refilled_by_the_daemon(cluster) -> None:
    lid = write_closed(cluster, 20)
    md = cluster.metadata.read_ledger(lid)
    victim = md.ensembles[0][2]
    lost = assigned_entries(md)[victim]
    seen = []
    with PeriodicAuditor.for_cluster(
        cluster, interval=0.05, recheck_delay=0.0, on_pass=seen.append
    ) as auditor:
        assert auditor.wait_for_passes(1, timeout=120)
        replace_disks(cluster, victim)  # the damage happens while the daemon runs
        first = auditor.passes
        # Passes go on on their own; one of them finds the empty bookie and refills it.
        while not any(r.entries_copied for r in seen[first - 1 :]):
            assert auditor.wait_for_passes(auditor.passes + 1, timeout=120)
    assert auditor.errors == 0
    for e in lost:
        assert cluster.read_from_bookie(victim, lid, e) == b"entry %d" % e
    assert lid not in cluster.metadata.underreplicated()
    passes = auditor.passes
    assert not auditor.running  # stopped: no more passes
    assert auditor.passes == passes


def test_a_failed_pass_is_counted_and_the_next_one_runs(cluster, monkeypatch) -> None:
    write_closed(cluster, 5)
    real_run = Replicator.run
    calls = []

    def flaky_run(self, ledger_ids=None):
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("metadata store unreachable")
        return real_run(self, ledger_ids)

    monkeypatch.setattr(Replicator, "run", flaky_run)
    with PeriodicAuditor.for_cluster(cluster, interval=0.05, recheck_delay=0.0) as auditor:
        assert auditor.wait_for_passes(3, timeout=120)
    assert auditor.errors == 1
    assert isinstance(auditor.last_error, ConnectionError)
    assert auditor.passes >= 2 and auditor.last is not None and auditor.last.ok


def test_check_only_never_repairs(cluster) -> None:
    lid = write_closed(cluster, 10)
    victim = cluster.metadata.read_ledger(lid).ensembles[0][0]
    replace_disks(cluster, victim)
    with PeriodicAuditor.for_cluster(
        cluster, interval=0.05, repair=False, recheck_delay=0.0
    ) as auditor:
        assert auditor.wait_for_passes(2, timeout=120)
    assert [c for c, _, _ in auditor.last.violations] == ["durability"]
    assert auditor.run_once().violations  # still broken: nothing was copied


def test_bad_interval_is_refused(cluster) -> None:
    with pytest.raises(ValueError, match="interval"):
        PeriodicAuditor.for_cluster(cluster, interval=0)


def test_cli_runs_the_given_number_of_passes(make_cluster, capsys) -> None:
    cluster = make_cluster(3)
    lid = write_closed(cluster, 10)
    victim = cluster.metadata.read_ledger(lid).ensembles[0][1]
    replace_disks(cluster, victim)
    data_dir = str(cluster.data_dir)
    cluster.stop()
    args = ["--data-dir", data_dir, "--recheck-delay", "0", "--interval", "0.05"]
    assert main(["auditor", "run", *args, "--passes", "2"]) == 0
    out = capsys.readouterr()
    lines = [line for line in out.out.splitlines() if "replicate:" in line]
    assert len(lines) == 2
    assert "1 repaired" in lines[0] and "0 ledger(s) needed repair" in lines[1]
    assert "a pass every 0.05s" in out.err
    assert main(["auditor", "run", *args, "--passes", "1", "--check-only"]) == 0
    assert "check:" in capsys.readouterr().out
