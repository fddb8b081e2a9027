"""``embedlog stream ...`` in a subprocess, against a stopped cluster's directory and a
running cluster on ZooKeeper (bookies over TCP)."""

from __future__ import annotations

import base64
import json
import os
import pty
import select
import subprocess
import sys

from cli_helpers import embedlog_env, run

from embedlog import LocalCluster, Retention
from embedlog.unbounded import layout


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


ORDERS_BYTES = sum(len(b"order %d" % i) for i in range(30))


def _answer_on_a_terminal(answer: str, *argv: str) -> tuple[int, str, str]:
    """``embedlog ARGV`` with a pseudo-terminal for stdin and stderr and its stdout sent
    to a pipe, as ``... > file`` does: the question is answered once the terminal shows
    it. (exit code, what the terminal showed, stdout)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "embedlog", *argv],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=slave,
        env=embedlog_env(),
    )
    os.close(slave)
    assert proc.stdout is not None
    shown = out = b""
    open_ends = [master, proc.stdout.fileno()]
    try:
        while proc.stdout.fileno() in open_ends:
            ready, _, _ = select.select(open_ends, [], [], 300)
            assert ready, f"no question on the terminal: {shown!r}, stdout {out!r}"
            for fd in ready:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:  # EIO: the terminal's other end is closed
                    chunk = b""
                if not chunk:
                    open_ends.remove(fd)
                elif fd == master:
                    if b"[y/N]" in chunk and b"[y/N]" not in shown:
                        os.write(master, answer.encode() + b"\n")
                    shown += chunk
                else:
                    out += chunk
            assert b"[y/N]" not in out, f"the question went to stdout: {out!r}"
        code = proc.wait(timeout=300)
        while master in open_ends and select.select([master], [], [], 0)[0]:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        os.close(master)
    return code, shown.decode(), out.decode()


def test_stream_commands_on_a_stopped_clusters_directory(tmp_path):
    d = tmp_path / "c"
    with LocalCluster(3, d) as cluster:
        lid = _make_stream(cluster)
    target = ("--data-dir", str(d))

    (row,) = json.loads(_ok("stream", "list", "--json", *target))
    assert row["name"] == "orders" and row["ledger_id"] == lid
    assert row["first_kept"] == 0 and row["lac"] == 30
    # 30 entries (the takeover's no-op at 20 is none) and their payload bytes, though
    # no stretch was sealed to record them (retention rolls over at 250 entries).
    assert (row["entries_kept"], row["bytes_kept"]) == (30, ORDERS_BYTES)
    assert row["dedup_window"] == 120.0
    assert row["retention"]["max_entries"] == 1000
    billing = row["cursors"]["billing"]
    assert (billing["position"], billing["lag"]) == (9, 21)
    assert 0 < billing["lag_seconds"] < 3600  # entry 10 waits since it was appended
    table = _ok("stream", "list", *target)
    assert "orders" in table and "entries=1000" in table and "entries kept" in table
    cells = next(line.split() for line in table.splitlines() if line.startswith("orders"))
    assert cells[4:7] == ["30", str(ORDERS_BYTES), "120s"]  # entries, bytes, dedup window

    shown = json.loads(_ok("stream", "show", "orders", *target))
    assert shown["state"] == "open" and shown["fragments"][0][0] == 0
    assert (shown["entries_kept"], shown["bytes_kept"], shown["dedup_window"]) == (
        30,
        ORDERS_BYTES,
        120.0,
    )

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
    # On a terminal it asks there (on stderr: stdout here is a pipe, as with > file).
    rewind = ("stream", "reset-cursor", "orders", "billing", "--to-entry", "3", *target)
    code, shown_on_tty, out = _answer_on_a_terminal("n", *rewind)
    assert code == 1 and out == "", shown_on_tty
    assert "move cursor 'billing' of stream orders back from 9 to 3?" in shown_on_tty
    assert "not moved" in shown_on_tty
    code, shown_on_tty, out = _answer_on_a_terminal("y", *rewind)
    assert code == 0 and "[y/N]" in shown_on_tty, shown_on_tty
    assert out == "cursor 'billing' of stream orders: 9 -> 3\n"  # not moved by the "n"
    _ok("stream", "reset-cursor", "orders", "billing", "--to-latest", *target)  # forward
    positions = json.loads(_ok("stream", "cursors", "orders", "--json", *target))
    assert positions["billing"]["position"] == 30
    _ok("stream", "reset-cursor", "orders", "billing", "--to-earliest", "--yes", *target)
    positions = json.loads(_ok("stream", "cursors", "orders", "--json", *target))
    assert positions["billing"]["position"] == -1

    _ok(
        "stream",
        "create",
        "audit",
        "--max-age",
        "3600",
        "--fragment-max-entries",
        "50",
        "--dedup-window",
        "30",
        *target,
    )
    listed = {r["name"]: r for r in json.loads(_ok("stream", "list", "--json", *target))}
    assert set(listed) == {"orders", "audit"}
    assert listed["audit"]["dedup_window"] == 30.0 and listed["audit"]["entries_kept"] == 0
    bad = run("stream", "create", "x", "--dedup-window", "-1", *target)
    assert bad.returncode == 2 and "give a number of seconds, 0 or more" in bad.stderr
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
        assert (row["entries_kept"], row["bytes_kept"]) == (30, ORDERS_BYTES)
        shown = json.loads(_ok("stream", "show", "orders", *target))
        assert shown["state"] == "open" and shown["quorum"] == "3/3/2"
        assert (shown["entries_kept"], shown["dedup_window"]) == (30, 120.0)
        assert shown["cursors"]["billing"]["position"] == 9

        # `ledger read`/`ledger tail` of a stream by name: what readers see.
        lines = _ok("ledger", "read", "orders", "--first", "19", "--last", "21", *target)
        assert lines.splitlines() == ["19\torder 19", "21\torder 20"]  # no-op 20 left out
        tailed = _ok("ledger", "tail", "orders", "-n", "2", *target)
        assert tailed.splitlines() == ["29\torder 28", "30\torder 29"]

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
        follower = cluster.client("x").open_unbounded("orders", takeover=False)
        live_at = follower.read(32, 32)[0].timestamp
        assert live_at is not None

        read = ("stream", "read", "orders", "--format", "json")
        some = [
            json.loads(line)
            for line in _ok(*read, "--from", "18", "--count", "3", *target).splitlines()
        ]
        assert [d["entry_id"] for d in some] == [18, 19, 21]
        assert base64.b64decode(some[2]["data_base64"]) == b"order 20" and "time" in some[2]
        since = _ok(*read, "--from-time", repr(live_at), "--count", "2", *target)
        assert _ids(since) == [32, 33]  # the first record at or after the time, two of them

        reset = ("stream", "reset-cursor", "orders", "billing")
        _ok(*reset, "--to-latest", *target)
        assert json.loads(_ok("stream", "cursors", "orders", "--json", *target)) == {
            "billing": {"position": 34, "lag": 0, "lag_seconds": 0.0}
        }
        refused = run(*reset, "--to-entry", "20", *target)  # back, without a terminal
        assert refused.returncode == 2 and "pass --yes" in refused.stderr
        assert follower.cursors() == {"billing": 34}
        moved = _ok(*reset, "--to-entry", "20", "--yes", *target)
        assert moved == "cursor 'billing' of stream orders: 34 -> 20\n"
        moved = _ok(*reset, "--to-time", repr(live_at), *target)  # forward: no question
        assert moved == "cursor 'billing' of stream orders: 20 -> 31\n"  # next taken: 32
        _ok(*reset, "--to-earliest", "--yes", *target)
        assert follower.cursors() == {"billing": -1}
        follower.close()

        _ok("stream", "create", "events", "--dedup-window", "0", *target)
        events = cluster.client("x").open_unbounded("events", takeover=False)
        assert layout.dedup_window(events.metadata) == 0.0
        events.close()
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
