"""Every path a command takes may be relative to where it runs: a stopped cluster's
directory, a password file, the sandbox's ZooKeeper directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run

from embedlog import LocalCluster
from embedlog.metadata.zkserver import ZooKeeperServer
from embedlog.wire.entry import DigestType


@pytest.fixture
def here(tmp_path: Path) -> Path:
    """A directory holding a stopped cluster, ``cluster``, and a password file, ``pw``."""
    with LocalCluster(3, tmp_path / "cluster") as cluster:
        wh = cluster.client().create_ledger(3, 3, 2, digest=DigestType.MAC, password=b"pw")
        for i in range(3):
            wh.add(b"entry %d" % i)
        wh.close()
    (tmp_path / "pw").write_bytes(b"pw\n")
    return tmp_path


def test_read_only_commands_take_relative_paths(here: Path) -> None:
    target = ("--data-dir", "cluster")
    outputs = {}
    for argv in (
        ["ledger", "list", "--json"],
        ["ledger", "show", "0"],
        ["ledger", "read", "0", "--password-file", "pw"],
        ["ledger", "tail", "-n", "1", "0", "--password-file", "pw"],
        ["bookie", "list", "--json"],
        ["bookie", "status", "--json"],
        ["auditor", "check", "--recheck-delay", "0"],
    ):
        out = run(*argv, *target, cwd=here)
        assert out.returncode == 0, (argv, out.stderr)
        outputs[argv[0] + " " + argv[1]] = out.stdout
    assert json.loads(outputs["ledger list"])[0]["entries"] == 3
    assert outputs["ledger read"] == "0\tentry 0\n1\tentry 1\n2\tentry 2\n"
    assert outputs["ledger tail"] == "2\tentry 2\n"
    assert len(json.loads(outputs["bookie list"])) == 3


def test_a_zookeeper_server_in_a_relative_directory_starts(tmp_path, monkeypatch) -> None:
    # The sandbox's own ZooKeeper (embedlog sandbox --data-dir sandbox-data): the JVM
    # runs in its directory, so a relative config path named nothing there.
    monkeypatch.chdir(tmp_path)
    server = ZooKeeperServer(Path("sandbox-data") / "zookeeper")
    try:
        server.start()
        assert server.serving()
    finally:
        server.stop()
    assert (tmp_path / "sandbox-data" / "zookeeper" / f"zoo-{server.port}.cfg").is_file()
