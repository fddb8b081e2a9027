"""Bookie processes (``embedlog bookie run``) through ZooKeeper outages, with a real
ZooKeeper stopped and restarted on its port:

* after ZooKeeper is back a bookie is registered at once: kazoo reconnects within
  ``RECONNECT_BOUND`` seconds, inside the session timeout, so the session and the
  registration survive the restart (kazoo's own backoff let them expire): the
  registration is the node the bookie's session made before the outage;
* each process says one warning line per outage;
* SIGTERM during an outage stops a bookie cleanly, the journal synced: the entries it
  acknowledged during the outage are there after a restart, and the restart finds no
  unclean shutdown;
* a client started while a bookie's registration is gone reaches it at the address its
  cookie records.

Times are measured and printed (``pytest -s`` shows them), never asserted.
"""

from __future__ import annotations

import datetime
import signal
import subprocess
import sys
import time
from pathlib import Path

from kazoo.client import KazooClient
from procs import Procs, env, finish, wait_line

import embedlog
from embedlog.metadata.client import AVAILABLE, MetadataClient
from embedlog.metadata.uri import open_store
from embedlog.metadata.zk_outage import RECONNECT_BOUND
from embedlog.metadata.zkserver import ZooKeeperServer, free_port

# Long enough that kazoo's default reconnect backoff (doubling towards a minute) would next
# try more than a session timeout (10 s) after ZooKeeper is back.
OUTAGE = 20.0
BACK = "answers again after"
EXPIRED = "a session had expired"


class Bookie:
    """One ``embedlog -v bookie run`` process; its log goes to a file (INFO: the outage's
    end is logged there, with its time)."""

    def __init__(self, procs: Procs, directory: Path, uri: str, port: int) -> None:
        self.directory, self.uri, self.port = directory, uri, port
        self.bookie_id = f"127.0.0.1:{port}"
        self.log = directory.with_suffix(".log")
        self.procs = procs
        self.proc = self._start()

    def _start(self) -> subprocess.Popen[str]:
        args = [
            sys.executable, "-m", "embedlog", "-v", "bookie", "run",
            "--data-dir", str(self.directory), "--metadata-uri", self.uri,
            "--listen", self.bookie_id,
        ]  # fmt: skip
        with self.log.open("a") as log:
            proc = subprocess.Popen(
                args,
                env=env(),
                text=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        self.procs.started.append(proc)
        wait_line(proc, "serving at")
        return proc

    def restart(self) -> None:
        self.proc = self._start()

    def sigterm(self) -> tuple[float, str]:
        """(seconds SIGTERM took to end the process, its stdout)."""
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        out, _ = finish(self.proc, 120)
        took = time.monotonic() - started
        assert self.proc.returncode == 0, self.lines()[-20:]
        return took, out

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines()

    def warnings(self, first: int) -> list[str]:
        return [line for line in self.lines()[first:] if " WARNING " in line]


def _logged_at(line: str) -> datetime.datetime:
    return datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")


def _owners(zk: ZooKeeperServer, chroot: str, ids: list[str]) -> dict[str, int]:
    """bookie id -> the session that owns its registration (the ephemeral node's owner)."""
    client = KazooClient(hosts=zk.hosts)
    client.start(timeout=30)
    try:
        return {b: client.get(f"{chroot}{AVAILABLE}/{b}")[1].ephemeralOwner for b in ids}
    finally:
        client.stop()
        client.close()


def _registered(meta: MetadataClient) -> list[str] | None:
    """The registered bookies, or None while the test's own client is reconnecting."""
    try:
        return sorted(meta.writable_bookies())
    except embedlog.errors.MetadataUnavailableError:
        return None


def test_bookie_processes_ride_out_zookeeper_outages(procs: Procs, tmp_path: Path) -> None:
    zk = ZooKeeperServer(tmp_path / "zk", port=free_port())
    zk.start()
    try:
        uri = zk.uri("/outage")
        bookies = [Bookie(procs, tmp_path / f"b{i}", uri, free_port()) for i in range(3)]
        ids = sorted(b.bookie_id for b in bookies)
        meta = MetadataClient(open_store(uri, tmp_path, metadata_timeout=1))
        try:
            _restart_keeps_registrations(zk, bookies, meta, ids)
            _sigterm_during_an_outage(zk, bookies, uri, meta)
            _a_registration_gone(bookies, uri, meta)
        finally:
            meta.store.close()
    finally:
        zk.stop()


def _restart_keeps_registrations(
    zk: ZooKeeperServer, bookies: list[Bookie], meta: MetadataClient, ids: list[str]
) -> None:
    assert _registered(meta) == ids
    owners = _owners(zk, "/outage", ids)
    marks = [len(b.lines()) for b in bookies]
    zk.stop()
    time.sleep(OUTAGE)
    zk.start()
    back_wall = datetime.datetime.now()
    # Every bookie says when all of its sessions answer again, and whether one had expired
    # (a session that did not reconnect within its timeout of ZooKeeper's restart): its
    # registration went with it, and the bookie made another one.
    deadline = time.monotonic() + 120  # against a hang only: they are back in about 1 s
    for b, mark in zip(bookies, marks, strict=True):
        while not any(BACK in line for line in b.lines()[mark:]):
            assert b.proc.poll() is None, b.lines()[mark:]
            assert time.monotonic() < deadline, f"{b.bookie_id} never back: {b.lines()[mark:]}"
            time.sleep(0.1)
    assert _registered(meta) == ids
    assert _owners(zk, "/outage", ids) == owners  # the sessions from before the outage
    for b, mark in zip(bookies, marks, strict=True):
        warnings = b.warnings(mark)
        assert len(warnings) == 1, warnings  # its store and its session share the outage
        assert f"ZooKeeper at {zk.hosts} is unreachable (Connection refused)" in warnings[0]
        again = [line for line in b.lines()[mark:] if BACK in line]
        assert len(again) == 1, b.lines()[mark:]
        assert EXPIRED not in again[0], again
        after = (_logged_at(again[0]) - back_wall).total_seconds()
        print(f"bookie {b.bookie_id} reconnected {after:+.2f}s after ZooKeeper answered again")


def _sigterm_during_an_outage(
    zk: ZooKeeperServer, bookies: list[Bookie], uri: str, meta: MetadataClient
) -> None:
    payloads = [b"entry %d" % i for i in range(20)]
    with embedlog.connect(uri, name="app", metadata_timeout=2) as app:
        wh = app.create_ledger(3, 3, 2)
        for p in payloads[:10]:
            wh.add(p)
        zk.stop()
        for p in payloads[10:]:  # adds need the bookies only: acknowledged during the outage
            wh.add(p)
        # Several reconnect attempts have failed by then: the bookies' clients are in their
        # pause between two (kazoo's own would be seconds long by now).
        time.sleep(3 * RECONNECT_BOUND)
        for b in bookies:
            mark = len(b.lines())
            took, out = b.sigterm()
            assert "stopped cleanly" in out
            print(f"bookie {b.bookie_id}: SIGTERM during the outage took {took:.2f}s")
            # It did not wait for ZooKeeper to unregister: its session's end does that.
            unregister = [line for line in b.lines()[mark:] if "could not unregister" in line]
            assert len(unregister) == 1 and "it does not wait" in unregister[0], unregister
    zk.start()
    for b in bookies:
        b.restart()
    for b in bookies:
        status = meta.bookie_status(b.bookie_id)
        assert status is not None
        assert status["unclean_shutdown_detected"] is False  # the stop flushed everything
    with embedlog.connect(uri, name="reader") as reader:
        rh = reader.open_ledger(wh.ledger_id)  # recovers: its writer is gone
        assert [e.data for e in rh.read(0, len(payloads) - 1)] == payloads


def _a_registration_gone(bookies: list[Bookie], uri: str, meta: MetadataClient) -> None:
    """A registration removed behind a serving bookie's back (as when its session expired
    and it has not registered again yet): with the other bookies stopped, a new client can
    read a ledger only from this one, at the address its cookie records."""
    payloads = [b"kept %d" % i for i in range(10)]
    with embedlog.connect(uri, name="writer") as writer:
        wh = writer.create_ledger(3, 3, 2)
        for p in payloads:
            wh.add(p)
        wh.close()
    for b in bookies[1:]:
        b.sigterm()
    meta.store.delete(f"{AVAILABLE}/{bookies[0].bookie_id}")
    assert _registered(meta) == []
    with embedlog.connect(uri, name="late") as late:
        rh = late.open_ledger(wh.ledger_id)
        assert [e.data for e in rh.read(0, len(payloads) - 1)] == payloads
    bookies[0].sigterm()
