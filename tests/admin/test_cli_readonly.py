"""Read-only commands never create or change anything; wrong paths are one-line errors;
--json prints JSON only. Every command runs for real, in a subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import embedlog_env, fingerprint, run

from embedlog import LocalCluster
from embedlog.wire.entry import DigestType

READ_ONLY = [
    ["ledger", "list"],
    ["ledger", "list", "--json"],
    ["ledger", "show", "0"],
    ["ledger", "read", "0"],
    ["ledger", "tail", "-n", "2", "0"],
    ["bookie", "list"],
    ["bookie", "list", "--json"],
    ["bookie", "status"],
    ["bookie", "status", "--json"],
    ["auditor", "check", "--recheck-delay", "0"],
]


def _cluster_dir(tmp_path: Path) -> Path:
    data_dir = tmp_path / "cluster"
    with LocalCluster(3, data_dir) as cluster:
        client = cluster.client()
        wh = client.create_ledger(3, 3, 2)
        for i in range(5):
            wh.add(b"entry %d" % i)
        wh.close()
        mac = client.create_ledger(3, 2, 2, digest=DigestType.MAC, password=b"pw")
        mac.add(b"\x00binary\n")
        mac.add(b"second")  # confirms the first: an open ledger with LAC 0
    return data_dir


@pytest.mark.parametrize("argv", [*READ_ONLY, ["ledger", "recover", "0"]], ids=" ".join)
def test_a_missing_data_dir_is_a_one_line_error_and_stays_missing(tmp_path, argv) -> None:
    missing = tmp_path / "does-not-exist"
    out = run(*argv, "--data-dir", str(missing))
    assert out.returncode == 2, out
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1, out.stderr
    assert str(missing) in out.stderr and "--metadata-uri" in out.stderr
    assert not missing.exists()


def test_a_directory_that_is_no_cluster_is_named(tmp_path) -> None:
    out = run("ledger", "list", "--data-dir", str(tmp_path))
    assert out.returncode == 2
    assert f"{tmp_path} holds no embedded metadata store" in out.stderr
    assert list(tmp_path.iterdir()) == []


def test_read_only_commands_change_nothing(tmp_path) -> None:
    data_dir = _cluster_dir(tmp_path)
    before = fingerprint(data_dir)
    outputs = {}
    for argv in READ_ONLY:
        out = run(*argv, "--data-dir", str(data_dir))
        assert out.returncode == 0, (argv, out.stderr)
        outputs[" ".join(argv)] = out.stdout
        assert fingerprint(data_dir) == before, f"{argv} changed {data_dir}"
    table = outputs["ledger list"].splitlines()
    assert table[0].split() == [
        "LEDGER",
        "STATE",
        "ENTRIES",
        "E/WQ/AQ",
        "ENSEMBLE",
        "FRAGMENTS",
        "KIND",
    ]
    assert table[1].split()[:4] == ["0", "closed", "5", "3/3/2"]
    assert table[2].split()[:4] == ["1", "open", "-", "3/2/2"]
    rows = json.loads(outputs["ledger list --json"])
    assert [(r["ledger_id"], r["state"], r["entries"]) for r in rows] == [
        (0, "closed", 5),
        (1, "open", None),
    ]
    assert outputs["ledger read 0"] == "".join(f"{i}\tentry {i}\n" for i in range(5))
    assert outputs["ledger tail -n 2 0"] == "3\tentry 3\n4\tentry 4\n"
    statuses = json.loads(outputs["bookie status --json"])  # JSON only: nothing before it
    assert sorted(statuses) == ["bookie-1", "bookie-2", "bookie-3"]
    assert {s["running"] for s in statuses.values()} == {"down"}
    listed = json.loads(outputs["bookie list --json"])  # a stopped cluster: every one down
    assert [(r["bookie_id"], r["state"]) for r in listed] == [
        (f"bookie-{i}", "down") for i in (1, 2, 3)
    ]


def test_read_opens_without_recovery_and_takes_the_password(tmp_path) -> None:
    data_dir = _cluster_dir(tmp_path)
    pw = tmp_path / "pw"
    pw.write_bytes(b"pw\n")
    args = ["--data-dir", str(data_dir)]
    out = run("ledger", "read", "1", "--password-file", str(pw), *args)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "0\t\\x00binary\\n\n"  # up to the LAC, escaped, ledger left open
    out = run("ledger", "read", "1", "--password-file", str(pw), "--json", *args)
    assert json.loads(out.stdout) == {"entry_id": 0, "size": 8, "data_base64": "AGJpbmFyeQo="}
    assert json.loads(run("ledger", "show", "1", *args).stdout)["state"] == "OPEN"
    wrong = run("ledger", "read", "1", *args)  # no password: refused, nothing printed
    assert wrong.returncode == 2 and wrong.stdout == ""


def test_auditor_check_leaves_a_bookie_that_needs_repair_alone(tmp_path) -> None:
    """A bookie whose disks were wiped and whose cookie was fixed repairs itself on its next
    boot: the check must look, not start that repair on the real disks."""
    data_dir = tmp_path / "cluster"
    with LocalCluster(3, data_dir, flush_interval=0.05) as cluster:
        wh = cluster.client().create_ledger(3, 3, 2)
        for i in range(20):
            wh.add(b"entry %d" % i)
        wh.close()
        victim = "bookie-1"
        cluster.stop_bookie(victim)
        cluster.wipe_bookie(victim, "all")
    out = run("bookie", "fixcookie", "--data-dir", str(data_dir), victim)
    assert out.returncode == 0, out.stderr
    before = fingerprint(data_dir)
    check = run("auditor", "check", "--recheck-delay", "0", "--data-dir", str(data_dir))
    assert check.returncode in (0, 1), check.stderr
    assert "violations:" in check.stdout
    assert fingerprint(data_dir) == before
    # The real boot still has its repair to do, and does it.
    with LocalCluster(0, data_dir) as cluster:
        assert cluster.bookie(victim).status()["repair"]["state"] in ("running", "done", "waiting")


def test_delete_asks_and_recover_closes(tmp_path) -> None:
    data_dir = _cluster_dir(tmp_path)
    args = ["--data-dir", str(data_dir)]
    refused = run("ledger", "delete", "0", *args, stdin="y\n")  # stdin is no terminal
    assert refused.returncode == 2 and "pass --yes" in refused.stderr
    assert run("ledger", "show", "0", *args).returncode == 0
    assert run("ledger", "delete", "0", "--yes", *args).stdout == "deleted ledger 0\n"
    gone = run("ledger", "show", "0", *args)
    assert gone.returncode == 2 and "does not exist" in gone.stderr

    env_pw = {"EMBEDLOG_LEDGER_PASSWORD": "pw"}
    out = run("ledger", "recover", "1", "--json", *args, env=embedlog_env(**env_pw))
    assert out.returncode == 0, out.stderr
    row = json.loads(out.stdout)
    assert (row["state"], row["entries"]) == ("closed", 2)
    read = run("ledger", "read", "1", "--format", "hex", *args, env=embedlog_env(**env_pw))
    first, second = b"\x00binary\n".hex(), b"second".hex()
    assert read.stdout == f"0\t{first}\n1\t{second}\n"


def test_version() -> None:
    import embedlog

    out = run("--version")
    assert out.stdout.strip() == f"embedlog {embedlog.__version__}"
