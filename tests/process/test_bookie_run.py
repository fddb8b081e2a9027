"""``embedlog bookie run``: one bookie server per process, registered in ZooKeeper."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from procs import Procs, env, finish, wait_line

import embedlog
from embedlog.metadata.client import MetadataClient
from embedlog.metadata.uri import open_store
from embedlog.metadata.zkserver import free_port

PAYLOADS = [f"entry {i}".encode() * 8 for i in range(30)]
RUN = [sys.executable, "-m", "embedlog", "bookie", "run"]


def start(
    procs: Procs, data_dir: Path, zk_uri: str, port: int, *extra: str
) -> subprocess.Popen[str]:
    proc = procs.embedlog(
        "bookie", "run", "--data-dir", str(data_dir), "--metadata-uri", zk_uri,
        "--listen", f"127.0.0.1:{port}", *extra,
    )  # fmt: skip
    wait_line(proc, "serving at")
    return proc


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> str:
    proc.send_signal(sig)
    out, err = finish(proc, 60)
    assert proc.returncode == 0, err
    return out


def test_bookie_servers_make_a_cluster_and_restart_as_themselves(
    procs: Procs, tmp_path: Path, zk_uri: str
) -> None:
    ports = [free_port() for _ in range(3)]
    servers = [start(procs, tmp_path / f"b{i}", zk_uri, p) for i, p in enumerate(ports)]
    ids = [f"127.0.0.1:{p}" for p in ports]  # named after their addresses, as in BookKeeper
    meta = MetadataClient(open_store(zk_uri, tmp_path))
    try:
        assert sorted(meta.writable_bookies()) == sorted(ids)
        assert meta.bookie_info(ids[0]) == {"address": ids[0], "rack": "/default-rack"}
        with embedlog.connect(zk_uri, name="app") as app:
            wh = app.create_ledger(3, 3, 2)
            for p in PAYLOADS:
                wh.add(p)
            wh.close()
        # SIGTERM and SIGINT both stop cleanly: registration gone, journal synced and
        # flushed (the next boot finds no unclean shutdown).
        assert "stopped cleanly" in stop(servers[0], signal.SIGTERM)
        assert "stopped cleanly" in stop(servers[1], signal.SIGINT)
        assert meta.writable_bookies() == [ids[2]]
        for i in (0, 1):
            status = meta.bookie_status(ids[i])
            assert status is not None and status["state"] == "stopped"
        # Restarted on the same disks without --id: the same bookies, cookies accepted.
        servers[0] = start(procs, tmp_path / "b0", zk_uri, ports[0])
        servers[1] = start(procs, tmp_path / "b1", zk_uri, ports[1])
        assert sorted(meta.writable_bookies()) == sorted(ids)
        for i in (0, 1):
            status = meta.bookie_status(ids[i])
            assert status is not None
            assert status["unclean_shutdown_detected"] is False
            assert status["suspicious_boot"] == []
        with embedlog.connect(zk_uri, name="reader") as reader:
            rh = reader.open_ledger(wh.ledger_id)
            assert [e.data for e in rh.read(0, len(PAYLOADS) - 1)] == PAYLOADS
        for s in servers:
            stop(s)
    finally:
        meta.store.close()


def run_fails(*args: str, config: str | None = None, cwd: Path | None = None) -> str:
    """Run ``bookie run`` expecting its one-line error; returns that line."""
    if config is not None:
        assert cwd is not None
        (cwd / "bookie.toml").write_text(config)
        args = (*args, "--config", str(cwd / "bookie.toml"))
    out = subprocess.run(
        [*RUN, *args], env=env(), capture_output=True, text=True, timeout=120, cwd=cwd
    )
    assert out.returncode == 2, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("embedlog bookie run: error: ")
    return lines[0]


def test_bad_settings_are_one_line_errors_naming_the_fix(tmp_path: Path, zk_uri: str) -> None:
    d, port = str(tmp_path / "b"), str(free_port())
    listen = f"127.0.0.1:{port}"
    base = ("--data-dir", d, "--metadata-uri", zk_uri)
    assert "--listen is required" in run_fails(*base)
    assert "give the cluster's ZooKeeper, zk://" in run_fails(
        "--data-dir", d, "--metadata-uri", "memory://", "--listen", listen
    )
    assert "give --advertise HOST:PORT" in run_fails(*base, "--listen", f"0.0.0.0:{port}")
    assert "give a fixed port" in run_fails(*base, "--listen", "127.0.0.1:0")
    assert "is not HOST:PORT" in run_fails(*base, "--listen", "nowhere")
    line = run_fails(*base, "--listen", listen, "--tls-cert", str(tmp_path / "nope.pem"))
    assert "tls_cert without tls_key" in line
    cfg = tmp_path
    line = run_fails(*base, "--listen", listen, config="flush_intervall = 1\n", cwd=cfg)
    assert "unknown setting 'flush_intervall'" in line and "flush_interval" in line
    line = run_fails(*base, "--listen", listen, config="flush_interval = -1\n", cwd=cfg)
    assert "flush_interval must be > 0" in line
    line = run_fails(*base, "--listen", listen, config='flush_interval = "1s"\n', cwd=cfg)
    assert "flush_interval must be a number" in line
    line = run_fails(*base, "--listen", listen, config="readonly = 1\n", cwd=cfg)
    assert "readonly must be bool" in line
    assert "not valid TOML" in run_fails(*base, "--listen", listen, config="x = = 1", cwd=cfg)
    assert "does not exist; check --config" in run_fails(
        *base, "--listen", listen, "--config", str(tmp_path / "missing.toml")
    )
    # A relative TLS path in the file is the file's: the error names it there.
    line = run_fails(
        *base, "--listen", listen, config='tls_cert = "c.pem"\ntls_key = "k.pem"\n', cwd=cfg
    )
    assert str(tmp_path / "c.pem") in line


def test_port_in_use_and_zookeeper_down_are_one_line_errors(tmp_path: Path, zk_uri: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = run_fails(
            "--data-dir", str(tmp_path / "b"), "--metadata-uri", zk_uri,
            "--listen", f"127.0.0.1:{port}",
        )  # fmt: skip
    assert "the port is in use" in line and "give another --listen port" in line
    line = run_fails(
        "--data-dir", str(tmp_path / "b"), "--metadata-uri", f"zk://127.0.0.1:{free_port()}/x",
        "--listen", f"127.0.0.1:{free_port()}", "--metadata-timeout", "1",
    )  # fmt: skip
    assert "cannot reach ZooKeeper" in line and "start it, or fix --metadata-uri" in line
    # Nothing was left behind by the refused starts.
    assert not (tmp_path / "b" / "journal").exists()


def test_cookie_mismatches_are_one_line_errors(procs: Procs, tmp_path: Path, zk_uri: str) -> None:
    port = free_port()
    first = start(procs, tmp_path / "one", zk_uri, port, "--id", "alpha")
    stop(first)
    other = ("--metadata-uri", zk_uri, "--listen", f"127.0.0.1:{free_port()}")
    # Another bookie (new disks) under a taken id.
    line = run_fails("--data-dir", str(tmp_path / "two"), *other, "--id", "alpha")
    assert "bookie id alpha is taken" in line and f"127.0.0.1:{port}" in line
    assert "give this bookie another --id" in line
    # The disks of alpha under another id.
    line = run_fails("--data-dir", str(tmp_path / "one"), *other, "--id", "beta")
    assert "these disks belong to bookie alpha" in line and "give --id alpha" in line
    # alpha moved to another address: its cookie no longer matches.
    line = run_fails("--data-dir", str(tmp_path / "one"), *other)
    assert "bookie alpha refuses to boot: the cookies in the metadata store, journal/" in line
    assert f"record address 127.0.0.1:{port}, and it now has 127.0.0.1:" in line
    assert "--auto-fix-cookies" in line
    # The operator accepts it: the bookie boots, fenced and repairing (BP-46).
    new_port = free_port()
    moved = start(procs, tmp_path / "one", zk_uri, new_port, "--auto-fix-cookies")
    stop(moved)
    # A second process on the same disks while the first runs.
    again = start(procs, tmp_path / "one", zk_uri, new_port)
    try:
        line = run_fails(
            "--data-dir", str(tmp_path / "one"), "--metadata-uri", zk_uri,
            "--listen", f"127.0.0.1:{free_port()}", "--advertise", f"127.0.0.1:{new_port}",
        )  # fmt: skip
        assert "one bookie at a time may use a bookie's disks: stop the other one" in line
    finally:
        stop(again)


def test_disks_another_bookie_holds_are_named_with_its_pid(
    procs: Procs, tmp_path: Path, zk_uri: str
) -> None:
    first = start(procs, tmp_path / "one", zk_uri, free_port())
    try:
        # Another address (its cookies would not match): the lock is what it says first.
        line = run_fails(
            "--data-dir", "one", "--metadata-uri", zk_uri,
            "--listen", f"127.0.0.1:{free_port()}", cwd=tmp_path,
        )  # fmt: skip
        assert f"is locked by another process: pid {first.pid} " in line
        assert "stop the other one first" in line and "--auto-fix-cookies" not in line
    finally:
        stop(first)


@pytest.mark.parametrize(
    "given, on_disk, advertise, expected",
    [
        (None, None, "10.0.0.5:3181", "10.0.0.5:3181"),  # BookKeeper's default naming
        (None, "alpha", "10.0.0.5:3181", "alpha"),  # a restart keeps its identity
        ("alpha", None, "10.0.0.5:3181", "alpha"),
        ("alpha", "alpha", "10.0.0.5:3181", "alpha"),
    ],
)
def test_choose_bookie_id(
    given: str | None, on_disk: str | None, advertise: str, expected: str
) -> None:
    from embedlog.process.settings import choose_bookie_id

    assert choose_bookie_id(given, on_disk, advertise) == expected


@pytest.mark.parametrize("given", ["", "a/b", ".."])
def test_choose_bookie_id_refuses_names_that_are_no_ids(given: str) -> None:
    from embedlog.process.settings import SettingError, choose_bookie_id

    with pytest.raises(SettingError, match="a bookie id is a non-empty name"):
        choose_bookie_id(given, None, "h:1")


def test_config_text_round_trips_through_the_reader(tmp_path: Path) -> None:
    from embedlog.process.settings import config_text, read_config_file

    settings = {
        "flush_interval": 0.25,
        "journal_max_group_wait": 1e-05,
        "readonly": True,
        "max_connections": 7,
        "rack": 'r"a\\ck\n\x7f é',
        "tls_cert": tmp_path / "c.pem",
    }
    path = tmp_path / "b.toml"
    path.write_text(config_text(settings))
    assert read_config_file(path) == {**settings, "tls_cert": str(tmp_path / "c.pem")}
