"""Bookies, a writer and readers, each in a process of its own, on a real ZooKeeper:
bookie processes are killed (SIGKILL) and paused (SIGSTOP) while the writer adds, then
the writer's process is killed and other processes recover and read its ledger. Nothing
acknowledged may be lost, and every reader must see the same entries (issue #17)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from procs import Procs, finish, processes_mentioning

from embedlog import LocalCluster
from embedlog.errors import BKError, NoSuchEntryError
from embedlog.transport.base import next_txn
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import OpCode, Request

WRITER = r"""
import sys, embedlog
uri = sys.argv[1]
client = embedlog.connect(uri, name="writer", request_timeout=2.0)
wh = client.create_ledger(3, 3, 2)
print("ledger", wh.ledger_id, flush=True)
i = 0
while True:
    eid = wh.add(b"payload-%d-" % i + bytes(1000))
    print("acked", eid, i, flush=True)
    i += 1
"""

READER = r"""
import hashlib, json, sys, embedlog
uri, lid = sys.argv[1], int(sys.argv[2])
client = embedlog.connect(uri, name=sys.argv[3], request_timeout=5.0)
rh = client.open_ledger(lid)  # recovery: fences the writer's bookies and closes the ledger
last = rh.last_add_confirmed
entries = rh.read(0, last) if last >= 0 else []
md = client.ledger_metadata(lid)
print(json.dumps({
    "last": last,
    "state": md.state.name,
    "last_entry_id": md.last_entry_id,
    "digests": [hashlib.sha256(e.data).hexdigest() for e in entries],
    "ids": [e.entry_id for e in entries],
    "heads": [e.data[:24].decode() for e in entries],
}), flush=True)
client.close()
"""


class Writer:
    """Reads the writer's acknowledgements as they come."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.acked: dict[int, int] = {}  # entry id -> payload number
        assert proc.stdout is not None
        first = proc.stdout.readline().split()
        assert first and first[0] == "ledger", first
        self.ledger_id = int(first[1])

    def wait_acks(self, count: int, timeout: float = 30.0) -> None:
        """Until ``count`` more adds are acknowledged."""
        assert self.proc.stdout is not None
        target = len(self.acked) + count
        deadline = time.monotonic() + timeout
        while len(self.acked) < target:
            assert time.monotonic() < deadline, f"writer stalled at {len(self.acked)} acks"
            line = self.proc.stdout.readline()
            if not line:
                err = self.proc.stderr.read() if self.proc.stderr else ""
                pytest.fail(f"writer exited ({self.proc.wait()}): {err}")
            _, eid, n = line.split()
            self.acked[int(eid)] = int(n)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        assert self.proc.stdout is not None
        for line in self.proc.stdout.read().splitlines():  # acks printed before it died
            parts = line.split()
            if len(parts) == 3 and parts[0] == "acked":
                self.acked[int(parts[1])] = int(parts[2])


@pytest.fixture
def cluster(procs: Procs, tmp_path: Path, zk_uri: str) -> Iterator[LocalCluster]:
    # Depends on procs: stopped before procs looks for orphans.
    c = LocalCluster(4, tmp_path / "cluster", processes=True, metadata_uri=zk_uri).start()
    try:
        yield c
    finally:
        c.stop()


def _last_fragment(cluster: LocalCluster, ledger_id: int) -> list[str]:
    ensembles = cluster.metadata.read_ledger(ledger_id).ensembles
    return list(ensembles[max(ensembles)])


def test_processes_killed_and_paused_while_adding_lose_nothing_acknowledged(
    cluster: LocalCluster, procs: Procs, zk_uri: str
) -> None:
    assert cluster.running_bookies() == ["bookie-1", "bookie-2", "bookie-3", "bookie-4"]
    writer = Writer(procs.python(WRITER, zk_uri))
    writer.wait_acks(100)
    ensemble = cluster.metadata.read_ledger(writer.ledger_id).ensembles[0]

    # SIGKILL a bookie of the ensemble: the writer replaces it and goes on.
    cluster.crash_bookie(ensemble[0])
    writer.wait_acks(100)
    cluster.start_bookie(ensemble[0])
    writer.wait_acks(50)

    # SIGSTOP another: the remaining two make the ack quorum; once it continues, it
    # answers what waited.
    paused = ensemble[1]
    cluster.pause_bookie(paused)
    pid = cluster.bookie_pid(paused)  # type: ignore[attr-defined]
    state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    assert state == "T"  # really stopped by the kernel
    writer.wait_acks(100)
    cluster.resume_bookie(paused)
    assert cluster.paused_bookies() == []
    writer.wait_acks(50)

    # Kill one more bookie and the writer itself, mid-stream.
    current = cluster.metadata.read_ledger(writer.ledger_id).ensembles
    last_ensemble = current[max(current)]
    cluster.crash_bookie(last_ensemble[2])
    # The writer replaces it before it is killed, as it replaced the first: the check of
    # every bookie below holds for bookies the metadata lists, and a killed bookie the
    # writer had no time to replace keeps no copy of what was added after its death
    # (acknowledged by the other two; under-replicated until the auditor's repair).
    guard = time.monotonic() + 60
    while last_ensemble[2] in _last_fragment(cluster, writer.ledger_id):
        assert time.monotonic() < guard, "the writer never replaced the killed bookie"
        time.sleep(0.01)
    writer.wait_acks(20)
    writer.kill()
    acked = writer.acked
    assert len(acked) >= 420

    # Two readers in two more processes recover the ledger at once.
    readers = [procs.python(READER, zk_uri, str(writer.ledger_id), f"r{i}") for i in range(2)]
    seen = []
    for r in readers:
        out, err = finish(r, 60)
        assert r.returncode == 0, err
        seen.append(json.loads(out))
    assert seen[0] == seen[1]  # every reader sees the same entries
    view = seen[0]
    assert view["state"] == "CLOSED" and view["last_entry_id"] == view["last"]
    assert view["ids"] == list(range(view["last"] + 1))
    assert max(acked) <= view["last"]  # nothing acknowledged lost
    for eid, n in acked.items():
        assert view["heads"][eid].startswith(f"payload-{n}-")
    # Entries are the writer's, in its order, without gaps or repeats.
    assert [h.split("-")[1] for h in view["heads"]] == [str(i) for i in range(view["last"] + 1)]

    # The bookies agree with the readers (the killed one restarted): no bookie holds other
    # bytes. Entry 0, settled long before, is on every bookie listed for it. The last
    # acknowledged entry is on at least an ack quorum of them: it may have been on its
    # way to the third when the writer died, and recovery closes the ledger once an ack
    # quorum has what it writes back (the auditor re-replicates the rest, as in
    # BookKeeper).
    cluster.start_bookie(last_ensemble[2])
    md = cluster.metadata.read_ledger(writer.ledger_id)
    starts = sorted(md.ensembles)
    for eid, least in ((0, 3), (max(acked), 2)):
        first = max(s for s in starts if s <= eid)
        held = 0
        for bid in md.ensembles[first]:
            if bid not in cluster.running_bookies():
                continue
            try:
                data = cluster.read_from_bookie(bid, writer.ledger_id, eid)
            except NoSuchEntryError:
                continue
            assert data.startswith(f"payload-{acked[eid]}-".encode()), (bid, eid)
            held += 1
        assert held >= least, (eid, held)


def test_a_paused_bookie_answers_after_it_continues(cluster: LocalCluster) -> None:
    client = cluster.client("c", request_timeout=0.5)
    wh = client.create_ledger(1, 1, 1)
    wh.add(b"held")
    wh.close()
    (bid,) = wh.metadata.ensembles[0]
    cluster.pause_bookie(bid)
    assert cluster.paused_bookies() == [bid]
    # A client's read times out: an unknown outcome, as for any silent bookie.
    rh = client.open_ledger(wh.ledger_id)
    with pytest.raises(BKError):
        rh.read(0, 0)
    # A request that waits longer is answered once the process continues.
    req = Request(OpCode.READ, next_txn(), wh.ledger_id, 0)
    answer = cluster.runtime.submit(cluster.transport.request("patient", bid, req, 30.0))
    time.sleep(1.0)
    assert not answer.done()
    cluster.resume_bookie(bid)
    assert answer.result(timeout=30).status == StatusCode.EOK
    assert [e.data for e in rh.read(0, 0)] == [b"held"]


def test_faults_that_need_in_process_bookies_say_so(cluster: LocalCluster) -> None:
    with pytest.raises(ValueError, match="processes=False"):
        cluster.network.delay_metadata(1.0)
    with pytest.raises(ValueError, match="repair client, which runs inside its process"):
        cluster.network.block("bookie-1-repair", "bookie-2")
    with pytest.raises(RuntimeError, match="runs in a process of its own"):
        cluster.bookie("bookie-1")
    with pytest.raises(RuntimeError, match="metrics with processes=True"):
        cluster.metrics()
    # A fault between this process's client and a bookie works as over TCP.
    client = cluster.client("c", request_timeout=0.5)
    wh = client.create_ledger(1, 1, 1)
    wh.add(b"x")
    wh.close()
    (bid,) = wh.metadata.ensembles[0]
    cluster.network.block("c", bid)
    rh = client.open_ledger(wh.ledger_id)
    with pytest.raises(BKError):
        rh.read(0, 0)
    cluster.network.heal()
    assert [e.data for e in rh.read(0, 0)] == [b"x"]


def test_processes_true_refuses_what_it_cannot_be() -> None:
    with pytest.raises(ValueError, match="reaches its bookies over TCP"):
        LocalCluster(3, processes=True, transport="inprocess")
    with pytest.raises(ValueError, match="cannot be shared by bookie processes"):
        LocalCluster(3, processes=True, metadata_uri="memory://")


def test_signals_map_to_the_api(cluster: LocalCluster) -> None:
    pid = cluster.bookie_pid("bookie-2")  # type: ignore[attr-defined]
    cluster.crash_bookie("bookie-2")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert "bookie-2" not in cluster.metadata.writable_bookies()  # its session ended
    cluster.start_bookie("bookie-2")
    assert "bookie-2" in cluster.metadata.writable_bookies()
    cluster.stop_bookie("bookie-2")
    status = cluster.metadata.bookie_status("bookie-2")
    assert status is not None and status["state"] == "stopped"
    assert "bookie-2" not in cluster.metadata.writable_bookies()


def test_a_cluster_of_processes_with_a_zookeeper_of_its_own_restarts_with_its_data(
    procs: Procs, tmp_path: Path
) -> None:
    data_dir = tmp_path / "own"
    with LocalCluster(3, data_dir, processes=True) as cluster:
        assert cluster.metadata_uri is not None and cluster.metadata_uri.startswith("zk://")
        uri = cluster.metadata_uri
        wh = cluster.client("w").create_ledger(3, 3, 2)
        for i in range(10):
            wh.add(b"kept %d" % i)
        wh.close()
    assert processes_mentioning(str(data_dir)) == []  # bookies and ZooKeeper stopped
    with LocalCluster(3, data_dir, processes=True) as cluster:
        assert cluster.metadata_uri == uri  # the same ZooKeeper port, the same metadata
        assert cluster.failed_bookies == {}
        rh = cluster.client("r").open_ledger(wh.ledger_id)
        assert [e.data for e in rh.read(0, 9)] == [b"kept %d" % i for i in range(10)]
