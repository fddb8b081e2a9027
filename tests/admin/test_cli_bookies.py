"""``embedlog bookie list`` and ``bookie status``: each bookie once, stopped clusters and
missing bookies said plainly. Real ZooKeeper, real bookies over TCP, the real command."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import run

from embedlog import LocalCluster
from embedlog.metadata.client import MetadataClient
from embedlog.metadata.uri import open_store


def test_bookie_list_shows_each_bookie_once(tmp_path: Path, embedlog_zookeeper) -> None:
    uri = embedlog_zookeeper.fresh_uri()
    with LocalCluster(3, tmp_path / "c", transport="tcp", metadata_uri=uri) as cluster:
        # A read-only bookie beside them, registered as a bookie registers itself.
        session = open_store(uri, tmp_path).session()
        try:
            meta = MetadataClient(session)
            meta.register_bookie(session, "bookie-ro", {"address": "127.0.0.1:9"}, readonly=True)
            table = run("bookie", "list", "--metadata-uri", uri)
            listed = run("bookie", "list", "--json", "--metadata-uri", uri)
        finally:
            session.close()
        addresses = {b: cluster.bookie_config(b).address for b in cluster.bookie_ids}
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["BOOKIE", "STATE", "ADDRESS", "RACK"]
    assert [line.split()[:3] for line in lines[1:]] == [
        *([b, "writable", addresses[b]] for b in sorted(addresses)),
        ["bookie-ro", "readonly", "127.0.0.1:9"],
    ]
    rows = json.loads(listed.stdout)
    assert [(r["bookie_id"], r["state"]) for r in rows] == [
        *((b, "writable") for b in sorted(addresses)),
        ("bookie-ro", "readonly"),
    ]


def _stopped_cluster(tmp_path: Path) -> Path:
    data_dir = tmp_path / "cluster"
    with LocalCluster(3, data_dir):
        pass
    return data_dir


def test_bookie_list_of_a_stopped_cluster_lists_its_bookies_as_down(tmp_path: Path) -> None:
    data_dir = _stopped_cluster(tmp_path)
    out = run("bookie", "list", "--data-dir", str(data_dir))
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines()[1:]]
    assert [r[:2] for r in rows] == [[f"bookie-{i}", "down"] for i in (1, 2, 3)]
    assert "no bookie is running" in out.stderr and "bookie status" in out.stderr
    listed = json.loads(run("bookie", "list", "--json", "--data-dir", str(data_dir)).stdout)
    assert [(r["bookie_id"], r["state"]) for r in listed] == [
        (f"bookie-{i}", "down") for i in (1, 2, 3)
    ]


def test_bookie_list_of_an_empty_cluster_says_so(tmp_path: Path) -> None:
    data_dir = tmp_path / "empty"
    with LocalCluster(0, data_dir):
        pass
    out = run("bookie", "list", "--data-dir", str(data_dir))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["BOOKIE", "STATE", "ADDRESS", "RACK"]
    assert "no bookie has booted in this cluster yet" in out.stderr


def test_bookie_status_of_a_missing_bookie_is_a_one_line_error(tmp_path: Path) -> None:
    data_dir = _stopped_cluster(tmp_path)
    out = run("bookie", "status", "bookie-9", "--data-dir", str(data_dir))
    assert out.returncode == 2, out
    assert out.stdout == ""
    assert out.stderr.splitlines() == [
        "embedlog bookie status: error: no bookie bookie-9 in this cluster (not registered, "
        "no cookie); its bookies: bookie-1, bookie-2, bookie-3 (`embedlog bookie list`)"
    ]
    known = run("bookie", "status", "bookie-2", "--json", "--data-dir", str(data_dir))
    assert known.returncode == 0 and json.loads(known.stdout)["bookie-2"]["running"] == "down"
