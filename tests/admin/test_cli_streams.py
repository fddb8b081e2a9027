"""``embedlog stream ...`` in a subprocess, against a stopped cluster's directory and a
running cluster on ZooKeeper (bookies over TCP)."""

from __future__ import annotations

import json
import subprocess
import sys

from cli_helpers import embedlog_env, run

from embedlog import LocalCluster, Retention


def _make_stream(cluster: LocalCluster) -> int:
    """ "orders": 30 entries, a takeover's no-op at 20, cursor "billing" at 9."""
    w = cluster.client("w")
    ul = w.create_unbounded(3, 3, 2, name="orders", retention=Retention(max_entries=1000))
    for i in range(20):
        ul.append(b"order %d" % i)
    ul.close()
    ul = cluster.client("w2").open_unbounded("orders")  # no-op at 20
    for i in range(20, 30):
        ul.append(b"order %d" % i)
    ul.commit("billing", 9)
    ul.close()
    return ul.ledger_id


def _ok(*argv: str) -> str:
    done = run(*argv)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _ids(text: str) -> list[int]:
    return [json.loads(line)["entry_id"] for line in text.splitlines()]


def test_stream_commands_on_a_stopped_clusters_directory(tmp_path):
    d = tmp_path / "c"
    with LocalCluster(3, d) as cluster:
        lid = _make_stream(cluster)
    target = ("--data-dir", str(d))

    (row,) = json.loads(_ok("stream", "list", "--json", *target))
    assert row["name"] == "orders" and row["ledger_id"] == lid
    assert row["first_kept"] == 0 and row["lac"] == 30 and row["ids_kept"] == 31
    assert row["retention"]["max_entries"] == 1000
    billing = row["cursors"]["billing"]
    assert (billing["position"], billing["lag"]) == (9, 21)
    assert 0 < billing["lag_seconds"] < 3600  # entry 10 waits since it was appended
    table = _ok("stream", "list", *target)
    assert "orders" in table and "entries=1000" in table

    shown = json.loads(_ok("stream", "show", "orders", *target))
    assert shown["state"] == "open" and shown["fragments"][0][0] == 0

    everything = _ids(_ok("stream", "read", "orders", "--format", "json", *target))
    assert everything == [*range(20), *range(21, 31)]  # the no-op at 20 is left out
    some = _ok("stream", "read", "orders", "--from", "18", "--count", "3", *target)
    assert some.splitlines() == ["18\torder 18", "19\torder 19", "21\torder 20"]
    raw = subprocess.run(
        [
            sys.executable,
            "-m",
            "embedlog",
            "stream",
            "read",
            str(lid),
            "--format",
            "raw",
            "--count",
            "2",
            *target,
        ],
        capture_output=True,
        env=embedlog_env(),
        timeout=300,
        check=True,
    ).stdout
    assert raw == b"order 0order 1"

    after_cursor = _ids(
        _ok("stream", "tail", "orders", "--cursor", "billing", "--format", "json", *target)
    )
    assert after_cursor == [*range(10, 20), *range(21, 31)]

    cursors = json.loads(_ok("stream", "cursors", "orders", "--json", *target))
    assert set(cursors) == {"billing"} and cursors["billing"]["lag"] == 21
    assert cursors["billing"]["lag_seconds"] > 0
    assert "lag (seconds)" in _ok("stream", "cursors", "orders", *target)

    # A rewind asks first: a script without a terminal must say --yes.
    refused = run("stream", "reset-cursor", "orders", "billing", "--to-entry", "3", *target)
    assert refused.returncode == 2
    assert "pass --yes" in refused.stderr and "Traceback" not in refused.stderr
    _ok("stream", "reset-cursor", "orders", "billing", "--to-entry", "3", "--yes", *target)
    _ok("stream", "reset-cursor", "orders", "billing", "--to-latest", *target)  # forward
    positions = json.loads(_ok("stream", "cursors", "orders", "--json", *target))
    assert positions["billing"]["position"] == 30
    _ok("stream", "reset-cursor", "orders", "billing", "--to-earliest", "--yes", *target)
    positions = json.loads(_ok("stream", "cursors", "orders", "--json", *target))
    assert positions["billing"]["position"] == -1

    _ok("stream", "create", "audit", "--max-age", "3600", "--fragment-max-entries", "50", *target)
    names = {r["name"] for r in json.loads(_ok("stream", "list", "--json", *target))}
    assert names == {"orders", "audit"}
    refused = run("stream", "delete", "audit", *target)
    assert refused.returncode == 2 and "pass --yes" in refused.stderr
    _ok("stream", "delete", "audit", "--yes", *target)
    assert [r["name"] for r in json.loads(_ok("stream", "list", "--json", *target))] == ["orders"]

    missing = run("stream", "show", "nope", *target)
    assert missing.returncode == 2 and "no stream named 'nope'" in missing.stderr
    trimmed = run("stream", "read", "orders", "--from", "-1", *target)
    assert trimmed.returncode == 2


def test_stream_commands_against_a_running_cluster(tmp_path, zk_uri):
    with LocalCluster(3, tmp_path / "c", transport="tcp", metadata_uri=zk_uri) as cluster:
        _make_stream(cluster)
        target = ("--metadata-uri", zk_uri)
        (row,) = json.loads(_ok("stream", "list", "--json", *target))
        assert row["lac"] == 30 and row["cursors"]["billing"]["lag"] == 21

        # A tail follows a running stream: it prints what comes, and stops when idle.
        writer = cluster.client("w3").open_unbounded("orders")
        tail = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "embedlog",
                "stream",
                "tail",
                "orders",
                "--cursor",
                "billing",
                "--idle",
                "5",
                "--format",
                "json",
                *target,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=embedlog_env(),
        )
        for i in range(3):
            writer.append(b"live %d" % i)
        out, err = tail.communicate(timeout=300)
        assert tail.returncode == 0, err
        ids = _ids(out)
        assert ids[0] == 10 and ids[-3:] == [32, 33, 34]  # after the takeover's no-op, 31
        writer.close()

        _ok("stream", "reset-cursor", "orders", "billing", "--to-latest", *target)
        assert json.loads(_ok("stream", "cursors", "orders", "--json", *target)) == {
            "billing": {"position": 34, "lag": 0, "lag_seconds": 0.0}
        }
        _ok("stream", "create", "events", *target)
        _ok("stream", "delete", "events", "--yes", *target)
        assert set(cluster.client("x").list_streams()) == {"orders"}


def test_ledger_read_and_tail_take_a_stream_and_show_what_readers_see(tmp_path):
    """`ledger read`/`ledger tail` of a stream (by name or id): payloads without the
    8-byte term prefix, the takeover's no-op left out, trimmed ids skipped."""
    d = tmp_path / "c"
    with LocalCluster(3, d) as cluster:
        lid = _make_stream(cluster)
    target = ("--data-dir", str(d))
    lines = _ok("ledger", "read", "orders", *target).splitlines()
    assert lines[0] == "0\torder 0" and lines[20] == "21\torder 20" and len(lines) == 30
    by_id = _ok("ledger", "read", str(lid), "--first", "19", "--last", "21", *target)
    assert by_id.splitlines() == ["19\torder 19", "21\torder 20"]
    assert _ok("ledger", "tail", "orders", "-n", "2", *target).splitlines() == [
        "29\torder 28",
        "30\torder 29",
    ]


def test_stream_read_shows_records_and_selects_by_time(tmp_path):
    d = tmp_path / "c"
    with LocalCluster(3, d) as cluster:
        ul = cluster.client("w").create_unbounded(3, 3, 2, name="clicks")
        for i in range(10):
            ul.append(b"click %d" % i, key=b"user-%d" % (i % 3), timestamp=1_800_000_000.0 + i)
        ul.append(b"tagged", headers={"src": b"web"}, msg_id="m-1", timestamp=1_800_000_100.0)
        ul.close()
    target = ("--data-dir", str(d))

    docs = [
        json.loads(line)
        for line in _ok("stream", "read", "clicks", "--format", "json", *target).splitlines()
    ]
    assert docs[1]["timestamp"] == 1_800_000_001.0
    assert docs[1]["time"] == "2027-01-15T08:00:01+00:00"
    assert docs[1]["key_base64"] == "dXNlci0x"  # b"user-1"
    assert docs[10]["headers_base64"] == {"src": "d2Vi"} and docs[10]["msg_id_base64"] == "bS0x"
    window = _ok(
        "stream", "read", "clicks", "--from-time", "1800000003", "--to-time", "1800000006", *target
    )
    assert window.splitlines() == ["3\tclick 3", "4\tclick 4", "5\tclick 5"]
    iso = _ok("stream", "read", "clicks", "--from-time", "2027-01-15T08:00:08", *target)
    assert iso.splitlines() == ["8\tclick 8", "9\tclick 9", "10\ttagged"]
    _ok("stream", "reset-cursor", "clicks", "c", "--to-time", "1800000004.5", *target)
    assert _ok("stream", "tail", "clicks", "--cursor", "c", *target).splitlines()[0] == "5\tclick 5"
    tail = _ok("stream", "tail", "clicks", "--from-time", "2027-01-15T09:00:09+01:00", *target)
    assert tail.splitlines() == ["9\tclick 9", "10\ttagged"]
    bad = run("stream", "read", "clicks", "--from-time", "yesterday", *target)
    assert bad.returncode == 2 and "give seconds since the epoch or ISO 8601" in bad.stderr


def test_a_stream_named_by_digits_is_never_taken_for_another_ledger(tmp_path):
    """A stream called "1" (ledger 0) beside "orders" (ledger 1): `stream delete 1` must
    not delete "orders" (it did, reading "1" as a ledger id). Digits that name a stream
    and another ledger are refused; digits that name only a stream are that stream."""
    d = tmp_path / "c"
    with LocalCluster(3, d) as cluster:
        w = cluster.client("w")
        for name in ("1", "orders", "7"):
            ul = w.create_unbounded(3, 3, 2, name=name)
            ul.append(b"in %s" % name.encode())
            ul.close()
        assert w.list_streams() == {"1": 0, "orders": 1, "7": 2}
    target = ("--data-dir", str(d))
    refused = run("stream", "delete", "1", "--yes", *target)
    assert refused.returncode == 2
    assert "give its ledger id 0" in refused.stderr and "its name 'orders'" in refused.stderr
    assert _ok("stream", "read", "7", *target).splitlines() == ["0\tin 7"]  # no ledger 7
    _ok("stream", "delete", "0", "--yes", *target)  # "1" by its ledger id
    names = [r["name"] for r in json.loads(_ok("stream", "list", "--json", *target))]
    assert names == ["7", "orders"]
