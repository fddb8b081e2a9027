"""``embedlog auditor check|replicate`` on a LocalCluster directory (embedded metadata)."""

from __future__ import annotations

from auditor_helpers import replace_disks, write_closed

from embedlog.cli import main


def test_check_then_replicate_then_check(make_cluster, capsys) -> None:
    cluster = make_cluster(3)
    lid = write_closed(cluster, 15)
    victim = cluster.metadata.read_ledger(lid).ensembles[0][0]
    replace_disks(cluster, victim)
    data_dir = str(cluster.data_dir)
    cluster.stop()  # the embedded store is for one process at a time
    args = ["--data-dir", data_dir, "--recheck-delay", "0"]

    assert main(["auditor", "check", *args]) == 1
    out = capsys.readouterr()
    assert f"durability\t{lid}\t" in out.out and victim in out.out
    assert "1/1 ledgers checked" in out.err  # progress

    assert main(["auditor", "replicate", *args]) == 0
    out = capsys.readouterr().out
    assert f"ledger {lid}: repaired" in out and f"copied to {victim}" in out

    assert main(["auditor", "check", "--json", *args]) == 0
    out = capsys.readouterr()
    assert out.out == "" and "violations: 0" in out.err


def test_clear_error_without_a_cluster(tmp_path, capsys) -> None:
    assert main(["auditor", "check"]) == 2
    assert "--metadata-uri" in capsys.readouterr().err
    assert main(["auditor", "check", "--data-dir", str(tmp_path)]) == 2
    assert "holds no embedded metadata store" in capsys.readouterr().err
    (tmp_path / "metadata").mkdir()
    assert main(["auditor", "check", "--data-dir", str(tmp_path)]) == 2
    assert "holds no bookies" in capsys.readouterr().err


def test_over_tcp_with_zookeeper_metadata(make_cluster, zk_uri, capsys) -> None:
    # The auditor in "another process": it finds the bookies through the metadata only.
    cluster = make_cluster(3, transport="tcp", metadata_uri=zk_uri)
    lid = write_closed(cluster, 10)
    victim = cluster.metadata.read_ledger(lid).ensembles[0][2]
    replace_disks(cluster, victim)
    args = ["--metadata-uri", zk_uri, "--recheck-delay", "0", "-q"]

    assert main(["auditor", "check", *args]) == 1
    assert f"durability\t{lid}\t" in capsys.readouterr().out
    assert main(["auditor", "replicate", *args]) == 0
    assert main(["auditor", "check", *args]) == 0
    assert cluster.read_from_bookie(victim, lid, 1) == b"entry 1"
