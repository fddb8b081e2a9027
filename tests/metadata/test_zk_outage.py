"""ZooKeeper outages, with a real ZooKeeper stopped and restarted on its port: a store waits
at most its metadata timeout, reconnects soon enough after a restart that its session (and
so a bookie's registration) survives, and logs one line per outage; a command line says
one line when ZooKeeper cannot be reached; a stream's tail waits through an outage.

Times are measured and printed (``pytest -s`` shows them), never asserted."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import embedlog
from embedlog import LocalCluster
from embedlog.errors import MetadataUnavailableError
from embedlog.ledger.entries import Entry
from embedlog.metadata.zkserver import ZooKeeperServer, free_port
from embedlog.metadata.zookeeper_store import ZooKeeperMetadataStore

ROOT = Path(__file__).resolve().parents[2]
# Long enough that kazoo's default reconnect backoff (doubling towards a minute) would
# next try well after ZooKeeper is back, and after the test sessions' timeout.
OUTAGE = 20.0
SESSION_TIMEOUT = 4.0


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    """A ZooKeeper of this test only, on a fixed port: stopping and starting it again is an
    outage its clients ride out (its data, sessions included, survive the restart)."""
    server = ZooKeeperServer(tmp_path / "zk", port=free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _noise(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The warning lines kazoo's and embedlog's loggers wrote."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith(("kazoo", "embedlog"))
    ]


def _embedlog(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    path = os.environ.get("PYTHONPATH", "")
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{path}" if path else str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "embedlog", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


@pytest.mark.parametrize(
    "command",
    [("ledger", "list"), ("bookie", "list"), ("auditor", "check"), ("sandbox", "--bookies", "1")],
)
def test_an_unreachable_zookeeper_is_one_line_after_the_metadata_timeout(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    port = free_port()  # nothing listens there
    started = time.monotonic()
    out = _embedlog(
        *command, "--metadata-uri", f"zk://127.0.0.1:{port}/x", "--metadata-timeout", "2",
        cwd=tmp_path,
    )  # fmt: skip
    print(f"{' '.join(command)}: exit {out.returncode} after {time.monotonic() - started:.2f}s")
    assert out.returncode == 2, out
    if command[0] != "sandbox":  # which says on stdout what it stops
        assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    name = " ".join(w for w in command if not w.startswith("-") and not w.isdigit())
    assert lines[0].startswith(
        f"embedlog {name}: error: cannot reach ZooKeeper at 127.0.0.1:{port} "
        "within 2s (Connection refused): start it, or fix the metadata URI"
    ), lines


def test_bookie_processes_of_a_local_cluster_get_its_metadata_timeout(tmp_path: Path) -> None:
    from embedlog.process.supervisor import CONFIG_FILE

    with pytest.raises(ValueError, match="metadata_timeout must be a number of seconds > 0"):
        LocalCluster(1, tmp_path / "none", metadata_timeout=0)
    with LocalCluster(1, tmp_path / "c", processes=True, metadata_timeout=3.5) as cluster:
        (bid,) = cluster.bookie_ids
        assert cluster.metadata.store.metadata_timeout == 3.5  # type: ignore[attr-defined]
        config = (tmp_path / "c" / bid / CONFIG_FILE).read_text()
        assert "metadata_timeout = 3.5" in config.splitlines()


def test_the_metadata_timeout_must_be_a_positive_number(tmp_path: Path) -> None:
    out = _embedlog(
        "ledger", "list", "--metadata-uri", "zk://127.0.0.1:2181/x", "--metadata-timeout", "0",
        cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 2
    assert "--metadata-timeout: '0': give a number of seconds above 0" in out.stderr
    with pytest.raises(ValueError, match="metadata_timeout must be > 0"):
        embedlog.connect("zk://127.0.0.1:2181/x", metadata_timeout=0)


def test_connect_gives_up_after_its_metadata_timeout_saying_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    port = free_port()
    started = time.monotonic()
    with pytest.raises(MetadataUnavailableError, match=rf"127\.0\.0\.1:{port} within 1s"):
        embedlog.connect(f"zk://127.0.0.1:{port}/x", metadata_timeout=1)
    print(f"connect() gave up after {time.monotonic() - started:.2f}s")
    assert _noise(caplog) == []  # the error says it all


def test_a_session_outlives_a_zookeeper_restart_and_the_outage_is_one_line(
    zookeeper: ZooKeeperServer, caplog: pytest.LogCaptureFixture
) -> None:
    store = ZooKeeperMetadataStore(
        zookeeper.hosts, "/t", timeout=SESSION_TIMEOUT, metadata_timeout=1.0
    )
    session = store.session()
    try:
        session.create("/held", b"registration", ephemeral=True)
        expired: list[bool] = []
        session.on_session_expired(lambda: expired.append(True))
        first = session.session_id
        caplog.set_level(logging.INFO)
        zookeeper.stop()
        started = time.monotonic()
        with pytest.raises(MetadataUnavailableError, match="is unreachable"):
            store.get("/held")
        print(f"a call gave up after {time.monotonic() - started:.2f}s (metadata timeout 1s)")
        time.sleep(OUTAGE)
        zookeeper.start()
        back = time.monotonic()
        while True:  # no deadline: pytest's own timeout applies
            try:
                session.get("/held")
                break
            except MetadataUnavailableError:
                pass
        print(f"answering again {time.monotonic() - back:.2f}s after ZooKeeper was back")
        # Past the session timeout after the restart, from when the server counts it: a
        # session that did not reconnect in time is gone now.
        time.sleep(max(0.0, back + SESSION_TIMEOUT + 1 - time.monotonic()))
        assert store.get("/held")[0] == b"registration"
        assert not session.held_by_another_session("/held")
        assert session.session_id == first
        assert expired == []
        warnings = _noise(caplog)
        assert len(warnings) == 1, warnings  # the store and the session share the outage
        assert warnings[0].startswith(f"ZooKeeper at {zookeeper.hosts} is unreachable (")
        assert any("answers again after" in r.getMessage() for r in caplog.records)
    finally:
        session.close()
        store.close()


def test_a_handshake_nobody_answers_is_given_up_after_a_share_of_the_session_timeout(
    zookeeper: ZooKeeperServer,
) -> None:
    """A restarting ZooKeeper sometimes takes a connection and never answers its handshake;
    kazoo by itself waits the session timeout for the answer, so a reconnect found its
    session expired (the registration test of tests/process failed so). Here a listener
    that takes connections and never answers stands in for that server: the client gives
    a handshake up after a share of the timeout and tries again."""
    store = ZooKeeperMetadataStore(
        zookeeper.hosts, "/t", timeout=SESSION_TIMEOUT, metadata_timeout=1.0
    )
    silent = socket.socket()
    accepted: list[tuple[float, socket.socket]] = []
    try:
        zookeeper.stop()
        silent.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        silent.bind(("127.0.0.1", zookeeper.port))
        silent.listen(16)
        silent.settimeout(60)  # against a hang only
        while len(accepted) < 2:
            conn, _ = silent.accept()  # never read, never answered
            accepted.append((time.monotonic(), conn))
        gap = accepted[1][0] - accepted[0][0]
        print(f"the second handshake came {gap:.2f}s after the first")
        # kazoo alone waits SESSION_TIMEOUT; the session would be gone by then.
        assert gap < SESSION_TIMEOUT
    finally:
        for _, conn in accepted:
            conn.close()
        silent.close()
        store.close()


def test_a_tail_waits_through_a_zookeeper_outage_and_says_so_once(
    tmp_path: Path, zookeeper: ZooKeeperServer, caplog: pytest.LogCaptureFixture
) -> None:
    uri = zookeeper.uri("/tail")
    payloads = [b"entry %d" % i for i in range(15)]
    with LocalCluster(3, tmp_path / "cluster", transport="tcp", metadata_uri=uri) as cluster:
        writer = cluster.client("writer").create_unbounded(3, 3, 2)
        for p in payloads[:5]:
            writer.append(p)
        seen: list[Entry] = []
        failed: list[BaseException] = []
        with embedlog.connect(uri, name="reader", metadata_timeout=1) as reader:
            tail = reader.open_unbounded(writer.ledger_id, takeover=False).tail(0)

            def follow() -> None:
                try:
                    for entry in tail:
                        seen.append(entry)
                except BaseException as exc:
                    failed.append(exc)

            thread = threading.Thread(target=follow, daemon=True)
            thread.start()
            while len(seen) < 5 and not failed:
                time.sleep(0.05)
            caplog.set_level(logging.INFO)
            zookeeper.stop()
            for p in payloads[5:10]:  # the writer goes on: the bookies need no ZooKeeper
                writer.append(p)
            time.sleep(4)  # the tail's metadata reads give up (1 s) and it waits on
            zookeeper.start()
            for p in payloads[10:]:
                writer.append(p)
            while len(seen) < len(payloads) and not failed and thread.is_alive():
                time.sleep(0.05)
            tail.close()
            thread.join()
        assert failed == []
        assert [e.data for e in seen] == payloads
        waits = [
            r.getMessage()
            for r in caplog.records
            if r.name == "embedlog.unbounded.tailing" and r.levelno >= logging.WARNING
        ]
        assert len(waits) == 1, waits
        assert f"ledger {writer.ledger_id}: the tail waits for the metadata store" in waits[0]


def test_a_renewal_that_keeps_failing_says_so_once(
    tmp_path: Path, zk_uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A bookie registering again retries every repair_retry_interval until it can; its
    warning comes once, not once per retry."""
    with LocalCluster(
        3, tmp_path / "cluster", metadata_uri=zk_uri, repair_retry_interval=0.05
    ) as cluster:
        bookie = cluster.bookie("bookie-2")
        path = "/bookies/available/bookie-2"
        store = cluster.metadata.store
        other = store.session()  # a second process with this id holds the registration
        try:
            store.delete(path)
            other.create(path, b'{"address": "elsewhere"}', ephemeral=True)
            caplog.set_level(logging.INFO)
            cluster.runtime.call(bookie.registration.refresh)
            time.sleep(1.0)  # about 20 retries
            assert bookie.registration.renewals == 0
        finally:
            other.close()
        while bookie.registration.renewals == 0:  # no deadline: pytest's own timeout applies
            time.sleep(0.02)
        failures = [
            r.getMessage()
            for r in caplog.records
            if r.name == "embedlog.bookie.registration" and r.levelno >= logging.WARNING
        ]
        assert len(failures) == 2, failures
        assert "bookie-2: could not register again yet" in failures[0]
        assert failures[1] == "bookie bookie-2: registered again as available"


def test_a_local_cluster_stops_during_an_outage_without_waiting_for_zookeeper(
    tmp_path: Path, zookeeper: ZooKeeperServer, caplog: pytest.LogCaptureFixture
) -> None:
    uri = zookeeper.uri("/stop")
    payloads = [b"entry %d" % i for i in range(10)]
    cluster = LocalCluster(3, tmp_path / "cluster", transport="tcp", metadata_uri=uri).start()
    try:
        wh = cluster.client("writer").create_ledger(3, 3, 2)
        for p in payloads:
            wh.add(p)
        wh.close()
        caplog.set_level(logging.INFO)
        zookeeper.stop()
    finally:
        started = time.monotonic()
        cluster.stop()
        print(f"LocalCluster.stop() during the outage took {time.monotonic() - started:.2f}s")
    unregistering = [
        r.getMessage() for r in caplog.records if "could not unregister" in r.getMessage()
    ]
    assert len(unregistering) == 3, unregistering
    assert all("this store is stopping: it does not wait" in m for m in unregistering)
    zookeeper.start()
    with LocalCluster(3, tmp_path / "cluster", transport="tcp", metadata_uri=uri) as again:
        for bid in again.bookie_ids:
            status = again.metadata.bookie_status(bid)
            assert status is not None and status["unclean_shutdown_detected"] is False
        rh = again.client("reader").open_ledger(wh.ledger_id)
        assert [e.data for e in rh.read(0, len(payloads) - 1)] == payloads
