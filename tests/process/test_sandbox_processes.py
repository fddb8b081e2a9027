"""``embedlog sandbox --processes``: the sandbox's bookies each in a process of its own."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from procs import Procs, env, finish, processes_mentioning

import embedlog


def test_sandbox_with_bookie_processes_serves_other_processes(
    procs: Procs, tmp_path: Path, zk_server: Any
) -> None:
    # zk_server only makes sure ZooKeeper is installed; the sandbox starts its own.
    data_dir = tmp_path / "sandbox"
    proc = procs.embedlog(
        "sandbox", "--processes", "--tls", "--bookies", "3", "--data-dir", str(data_dir)
    )
    assert proc.stdout is not None
    info: dict[str, str] = {}
    for line in proc.stdout:
        if m := re.match(r"metadata URI: (\S+)", line):
            info["uri"] = m.group(1)
        if m := re.match(r"TLS CA certificate: (\S+)", line):
            info["ca"] = m.group(1)
        if "sandbox running" in line:
            break
    else:
        raise AssertionError(f"sandbox did not start: {proc.stderr.read() if proc.stderr else ''}")
    # Every bookie is a process of its own, under the sandbox's directory.
    for bid in ("bookie-1", "bookie-2", "bookie-3"):
        assert len(processes_mentioning(str(data_dir / bid))) == 1
    with embedlog.connect(info["uri"], name="app", tls_ca=info["ca"]) as app:
        wh = app.create_ledger(3, 3, 2)
        for i in range(20):
            wh.add(b"over TLS %d" % i)
        wh.close()
        assert len(app.open_ledger(wh.ledger_id).read(0, 19)) == 20
    proc.send_signal(signal.SIGINT)
    out, _ = finish(proc, 60)
    assert proc.returncode == 0 and "sandbox stopped" in out
    assert processes_mentioning(str(data_dir)) == []
    for bid in ("bookie-1", "bookie-2", "bookie-3"):
        assert f"bookie {bid} stopped cleanly" in (data_dir / bid / "bookie.log").read_text()


def test_sandbox_processes_with_metrics_is_one_line(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "embedlog", "sandbox", "--processes", "--metrics-port", "0",
         "--data-dir", str(tmp_path / "d")],
        env=env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "embedlog sandbox: error: --metrics-port with --processes: the bookies' metrics stay in "
        "their processes and are not exported yet; leave out one of the two"
    ]
