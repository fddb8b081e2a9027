"""Two LocalClusters on one ZooKeeper (two processes or two hosts): their bookies' ids
never collide, and each keeps its own across restarts (issue #17)."""

from __future__ import annotations

from pathlib import Path

import embedlog
from embedlog import LocalCluster

PAYLOADS = [f"entry {i}".encode() for i in range(20)]


def test_two_clusters_on_one_zookeeper_choose_different_ids(tmp_path: Path, zk_uri: str) -> None:
    one = LocalCluster(1, tmp_path / "one", transport="tcp", metadata_uri=zk_uri).start()
    try:
        two = LocalCluster(2, tmp_path / "two", transport="tcp", metadata_uri=zk_uri).start()
        try:
            assert one.bookie_ids == ["bookie-1"]
            assert two.bookie_ids == ["bookie-2", "bookie-3"]
            assert two.failed_bookies == {}
            # One cluster now: a client of the shared metadata writes across all three.
            with embedlog.connect(zk_uri, name="app") as app:
                # AQ3: each add waits for every bookie, so each one holds the entries
                # read from it below (with AQ2 the slowest one may not have them yet).
                wh = app.create_ledger(3, 3, 3)
                for p in PAYLOADS:
                    wh.add(p)
                wh.close()
                ensemble = wh.metadata.ensembles[0]
            assert sorted(ensemble) == ["bookie-1", "bookie-2", "bookie-3"]
            assert two.read_from_bookie("bookie-3", wh.ledger_id, 5) == PAYLOADS[5]
            assert one.read_from_bookie("bookie-1", wh.ledger_id, 19) == PAYLOADS[19]
        finally:
            two.stop()
    finally:
        one.stop()
    # Restarted in the other order, each finds its own bookies (and cookies) again.
    two = LocalCluster(2, tmp_path / "two", transport="tcp", metadata_uri=zk_uri).start()
    one = LocalCluster(1, tmp_path / "one", transport="tcp", metadata_uri=zk_uri).start()
    try:
        assert (one.bookie_ids, two.bookie_ids) == (["bookie-1"], ["bookie-2", "bookie-3"])
        assert one.failed_bookies == {} and two.failed_bookies == {}
        assert two.read_from_bookie("bookie-2", wh.ledger_id, 0) == PAYLOADS[0]
        # A third bookie added to the first cluster skips the ids the second one holds.
        assert one.add_bookie() == "bookie-4"
    finally:
        one.stop()
        two.stop()
