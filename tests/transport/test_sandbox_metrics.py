"""`embedlog sandbox --metrics-port`: Prometheus metrics of the sandbox's bookies, scraped
from another process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import embedlog
from embedlog.metadata.zkserver import free_port


def test_sandbox_serves_prometheus_metrics(tmp_path: Path, zk_uri: str) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "embedlog",
            "sandbox",
            "--data-dir",
            str(tmp_path / "sb"),
            "--metadata-uri",
            zk_uri,
            "--metrics-port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    assert proc.stdout is not None
    try:
        lines: list[str] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and "sandbox running" not in "".join(lines):
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
        url = f"http://127.0.0.1:{port}/metrics"
        assert f"Prometheus metrics: {url}\n" in lines, "".join(lines)
        with embedlog.connect(zk_uri) as client:
            wh = client.create_ledger(3, 3, 2)
            for i in range(30):
                wh.add(b"%d" % i)
            wh.close()
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        values = dict(
            line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#")
        )
        # The client is in this process: the sandbox's bookies counted its entries.
        assert float(values["embedlog_bookie_entries_added_total"]) >= 60
        assert float(values["embedlog_bookies_running"]) == 3
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out


def test_sandbox_refuses_a_bad_metrics_port(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "embedlog",
            "sandbox",
            "--data-dir",
            str(tmp_path),
            "--metrics-port",
            "70000",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert "--metrics-port must be a port number" in out.stderr + out.stdout
