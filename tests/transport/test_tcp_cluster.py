"""LocalCluster(transport="tcp"), connect() from other clients and processes, the sandbox."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tls_certs import make_pki

pytest.importorskip("embedlog.bookie.bookie")

import embedlog
from embedlog.errors import (
    BKTimeoutError,
    BookieUnavailableError,
    NoSuchEntryError,
    NoSuchLedgerError,
    TlsHandshakeError,
)
from embedlog.metadata.zkserver import four_letter
from embedlog.transport.base import next_txn
from embedlog.transport.tcp import TcpCluster, parse_address
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import OpCode, Request

PAYLOADS = [f"entry {i} ".encode() * (i + 1) for i in range(20)]


def write_ledger(client: Any, payloads: list[bytes] = PAYLOADS) -> int:
    wh = client.create_ledger(3, 3, 2)
    for p in payloads:
        wh.add(p)
    wh.close()  # closed: a reader that does not recover sees every entry
    return int(wh.ledger_id)


def read_all(client: Any, ledger_id: int, **kw: Any) -> list[bytes]:
    rh = client.open_ledger(ledger_id, **kw)
    data = [e.data for e in rh.read(0, rh.last_add_confirmed)] if rh.last_add_confirmed >= 0 else []
    rh.close()
    return data


def registered(cluster: Any) -> dict[str, str]:
    return {b: str(cluster.metadata.bookie_info(b)["address"]) for b in cluster.running_bookies()}


def test_tcp_cluster_write_read_recover(make_cluster: Any) -> None:
    cluster = make_cluster(3, transport="tcp")
    assert isinstance(cluster.transport, TcpCluster)
    addrs = registered(cluster)
    assert set(addrs) == set(cluster.bookie_ids)
    for bid, addr in addrs.items():
        assert parse_address(addr)[0] == "127.0.0.1"
        assert cluster.transport.servers[bid].address == addr  # really listening there
    writer = cluster.client("writer")
    wh = writer.create_ledger(3, 3, 2)
    for p in PAYLOADS:
        wh.add(p)
    assert [e.data for e in wh.read(0, len(PAYLOADS) - 1)] == PAYLOADS
    # The writer dies without closing; a bookie crashes; another client recovers the ledger.
    victim = wh.metadata.ensembles[0][0]
    # The adds returned at AQ2, maybe before the victim had entry 0 (over TCP its frames
    # can still be on their way): wait until it holds it, then until its journal made
    # what it appended durable, so that the victim still holds entry 0 once it is back.
    while True:
        try:
            assert cluster.read_from_bookie(victim, wh.ledger_id, 0) == PAYLOADS[0]
            break
        except (NoSuchEntryError, NoSuchLedgerError):
            time.sleep(0.01)
    journal = cluster.bookie(victim).journal
    assert journal is not None
    cluster.runtime.run(journal.sync())
    cluster.crash_bookie(victim)
    reader = cluster.client("reader")
    assert read_all(reader, wh.ledger_id) == PAYLOADS
    md = reader.ledger_metadata(wh.ledger_id)
    assert md.state is embedlog.LedgerState.CLOSED and md.last_entry_id == len(PAYLOADS) - 1
    cluster.start_bookie(victim)
    assert cluster.read_from_bookie(victim, wh.ledger_id, 0) == PAYLOADS[0]


def test_addresses_survive_restarts_and_wipes(make_cluster: Any, tmp_path: Path) -> None:
    data_dir = tmp_path / "c"
    cluster = make_cluster(3, transport="tcp", data_dir=data_dir)
    before = registered(cluster)
    for bid, addr in before.items():
        assert (data_dir / bid / "address").read_text().strip() == addr
    lid = write_ledger(cluster.client("w"))
    bid = cluster.bookie_ids[0]
    cluster.stop_bookie(bid)
    cluster.start_bookie(bid)  # the cookie (with the address in it) still matches
    cluster.stop_bookie(bid)
    cluster.wipe_bookie(bid, "all")
    assert (data_dir / bid / "address").exists()
    cluster.stop()
    again = make_cluster(3, transport="tcp", data_dir=data_dir, auto_fix_cookies=True)
    assert registered(again) == before
    assert read_all(again.client("r"), lid) == PAYLOADS


def test_tls_cluster(make_cluster: Any, tmp_path: Path) -> None:
    cluster = make_cluster(3, transport="tcp", tls=True, data_dir=tmp_path / "tls-cluster")
    ca = cluster.transport.tls_ca
    assert ca == tmp_path / "tls-cluster" / "tls" / "cert.pem" and ca.exists()
    client = cluster.client("c1")
    lid = write_ledger(client)
    assert read_all(client, lid) == PAYLOADS
    conn = next(iter(cluster.transport.client._conns.values()))
    assert conn._writer.get_extra_info("ssl_object") is not None


def test_faults_over_tcp_cluster(make_cluster: Any) -> None:
    cluster = make_cluster(3, transport="tcp")
    lid = write_ledger(cluster.client("w"))
    bid = cluster.bookie_ids[0]

    def read(src: str, timeout: float = 0.3) -> Any:
        req = Request(OpCode.READ, next_txn(), lid, 0)
        return cluster.runtime.run(cluster.transport.request(src, bid, req, timeout))

    assert read("x").status == StatusCode.EOK
    cluster.network.drop_next("x", bid, "read")
    with pytest.raises(BKTimeoutError):
        read("x")
    assert read("x").status == StatusCode.EOK
    cluster.network.block("x", bid)
    with pytest.raises(BKTimeoutError):
        read("x")
    assert read("y").status == StatusCode.EOK
    cluster.network.heal()
    assert read("x").status == StatusCode.EOK


@pytest.mark.parametrize("use_tls", [False, True], ids=["plain", "tls"])
def test_connect_from_a_second_client(make_cluster: Any, zk_uri: str, use_tls: bool) -> None:
    cluster = make_cluster(3, transport="tcp", tls=use_tls, metadata_uri=zk_uri)
    lid = write_ledger(cluster.client("w"))
    ca = cluster.transport.tls_ca if use_tls else None
    with embedlog.connect(zk_uri, name="other", tls_ca=ca) as other:
        assert read_all(other, lid, recover=False) == PAYLOADS
        mine = write_ledger(other, PAYLOADS[:3])
        assert lid in set(other.list_ledgers())
    assert read_all(cluster.client("r"), mine) == PAYLOADS[:3]


def test_connect_with_wrong_ca_fails_clearly(
    make_cluster: Any, zk_uri: str, tmp_path: Path
) -> None:
    from embedlog.transport import tls

    cluster = make_cluster(3, transport="tcp", tls=True, metadata_uri=zk_uri)
    lid = write_ledger(cluster.client("w"))
    wrong, _ = tls.ensure_self_signed(tmp_path / "wrong")
    bid = cluster.bookie_ids[0]
    with embedlog.connect(zk_uri, name="other", tls_ca=wrong, request_timeout=2) as other:
        call = other.ctx.bookies.call(bid, OpCode.READ, lid, 0)
        with pytest.raises(BookieUnavailableError, match="certificate verification failed"):
            other.runtime.run(call)


# -- the sandbox, from another process ------------------------------------------------------


def _start_sandbox(
    data_dir: Path, *extra: str, own_group: bool = False
) -> tuple[subprocess.Popen[str], dict[str, str]]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "embedlog", "sandbox", "--data-dir", str(data_dir), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        # As in a terminal: the sandbox leads a process group that a Ctrl-C goes to whole.
        start_new_session=own_group,
    )
    assert proc.stdout is not None
    info: dict[str, str] = {}
    lines = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if m := re.match(r"metadata URI: (\S+)", line):
            info["uri"] = m.group(1)
        if m := re.match(r"TLS CA certificate: (\S+)", line):
            info["ca"] = m.group(1)
        if m := re.match(r"starting ZooKeeper on (\S+)", line):
            info["zookeeper"] = m.group(1)
        if m := re.match(r"bookie (\S+): (\S+)", line):
            info[m.group(1)] = m.group(2)
        if "sandbox running" in line:
            return proc, info
    proc.kill()
    raise AssertionError("sandbox did not start:\n" + "".join(lines))


def _stop_sandbox(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    return out


@pytest.mark.parametrize("use_tls", [False, True], ids=["plain", "tls"])
def test_sandbox_serves_other_processes_and_restarts(
    tmp_path: Path, zk_server: Any, use_tls: bool
) -> None:
    # zk_server only makes sure ZooKeeper is installed (and fails with the install hint if not).
    extra = ["--tls"] if use_tls else []
    proc, info = _start_sandbox(tmp_path, *extra)
    try:
        assert info["uri"].startswith("zk://127.0.0.1:")
        assert {"bookie-1", "bookie-2", "bookie-3"} <= set(info)
        with embedlog.connect(info["uri"], tls_ca=info.get("ca")) as client:
            lid = write_ledger(client)
            assert read_all(client, lid, recover=False) == PAYLOADS
    finally:
        out = _stop_sandbox(proc)
    assert "sandbox stopped" in out
    # Same data directory: same metadata URI, same bookie addresses, the ledger is still there.
    proc, again = _start_sandbox(tmp_path, *extra)
    try:
        assert again == info
        with embedlog.connect(again["uri"], tls_ca=again.get("ca")) as client:
            assert read_all(client, lid) == PAYLOADS
    finally:
        _stop_sandbox(proc)


def test_ctrl_c_stops_the_sandbox_in_order_within_seconds(tmp_path: Path, zk_server: Any) -> None:
    """A terminal's Ctrl-C signals the whole foreground process group. ZooKeeper, in a
    session of its own, must not die first: the bookies stop while it still answers, then
    it stops, and nothing prints a traceback."""
    proc, info = _start_sandbox(tmp_path, own_group=True)
    zk_port = int(info["zookeeper"].rpartition(":")[2])
    with embedlog.connect(info["uri"]) as client:
        write_ledger(client)
    start = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    took = time.monotonic() - start
    print(f"sandbox stopped {took:.1f}s after Ctrl-C")
    assert proc.returncode == 0, out
    assert "Traceback" not in out, out
    order = [
        out.index(s) for s in ("stopping the bookies", "stopping ZooKeeper", "sandbox stopped")
    ]
    assert order == sorted(order), out
    with pytest.raises(OSError):
        four_letter(zk_port)  # and ZooKeeper is gone too


def test_sandbox_with_the_operators_certificates(tmp_path: Path, zk_uri: str) -> None:
    pki = make_pki(tmp_path / "pki")
    proc, info = _start_sandbox(
        tmp_path / "sandbox",
        "--metadata-uri",
        zk_uri,
        "--tls-cert",
        str(pki.bookie.cert),
        "--tls-key",
        str(pki.bookie.key),
        "--tls-ca",
        str(pki.ca.cert),
        "--tls-require-client-cert",
    )
    try:
        assert info["ca"] == str(pki.ca.cert)
        mine = {"tls_ca": pki.ca.cert, "tls_cert": pki.client.cert, "tls_key": pki.client.key}
        with embedlog.connect(zk_uri, **mine) as client:
            lid = write_ledger(client)
            assert read_all(client, lid, recover=False) == PAYLOADS
        stranger = embedlog.connect(zk_uri, tls_ca=pki.ca.cert, request_timeout=600)
        with stranger, pytest.raises(TlsHandshakeError, match="refuses this client's certificate"):
            read_all(stranger, lid, recover=False)
    finally:
        _stop_sandbox(proc)


def test_sandbox_without_zookeeper_says_what_to_install(tmp_path: Path) -> None:
    env = dict(os.environ, ZOOKEEPER_HOME=str(tmp_path / "nowhere"))
    env.pop("ZOOKEEPER_CLASSPATH", None)
    out = subprocess.run(
        [sys.executable, "-m", "embedlog", "sandbox", "--data-dir", str(tmp_path / "d")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 2
    assert "apt-get install -y zookeeper" in out.stderr
