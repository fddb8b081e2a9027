"""A bookie process whose ZooKeeper session expired registers again with a new session,
and reports it: killing the process afterwards still ends the session that holds its
registration at once."""

from __future__ import annotations

import json
import time
from pathlib import Path

from embedlog import LocalCluster
from embedlog.metadata.uri import parse_zk_uri
from embedlog.metadata.zookeeper_store import expire_session
from embedlog.process.supervisor import READY_FILE


def _reported(directory: Path) -> tuple[int, bytes] | None:
    """The session the child last reported in its ready file."""
    sid = json.loads((directory / READY_FILE).read_text())["session"]
    return None if sid is None else (int(sid[0]), bytes.fromhex(sid[1]))


def test_a_crash_after_a_new_registration_ends_the_new_session(
    procs: object, tmp_path: Path, zk_uri: str
) -> None:
    cluster = LocalCluster(3, tmp_path / "cluster", processes=True, metadata_uri=zk_uri).start()
    try:
        proc = cluster._procs["bookie-2"]  # type: ignore[attr-defined]
        first = proc.session
        assert first is not None
        expire_session(parse_zk_uri(zk_uri)[0], first)  # ZooKeeper ends it; the child goes on
        while _reported(proc.dir) == first:  # no deadline: pytest's own timeout applies
            time.sleep(0.05)
        while "bookie-2" not in cluster.metadata.writable_bookies():
            time.sleep(0.05)
        cluster.crash_bookie("bookie-2")
        assert cluster.metadata.writable_bookies() == ["bookie-1", "bookie-3"]
    finally:
        cluster.stop()
