"""A commit into a stream whose process is killed (SIGKILL): the next commit finishes it,
and the replayed batch is not appended again. First the committing process alone, killed
half-way through its appends; then a whole Spark driver (its Python, JVM and workers)
killed at several points of a streaming commit into a stream with retention."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sink_crash_driver
from processes import driver_env, kill_tree

from embedlog import Retention
from spark_connector import forget_sink, temporary_ledgers
from spark_connector.options import WriteOptions
from spark_connector.stream_commit import (
    StreamCommit,
    StreamCommitError,
    _records,
    temporary_metadata,
)

ROWS_PER_TEMP = 3_000
HOLD = 200  # rows past the kill point after which the killed commit waits for its kill
_ROOT = Path(__file__).resolve().parents[2]

# The commit is killed while it appends (up to 20 appends in flight); it waits at
# ``hold`` rows, so that however late the kill comes on a loaded machine it comes mid-way.
_DRIVER = """
import json, sys, threading
import embedlog
from spark_connector.options import WriteOptions
from spark_connector.stream_commit import StreamCommit
uri, stream, sink, batch, write_id, temps, hold = sys.argv[1:]
rows = StreamCommit.rows
def holding_rows(self, temps, skip):
    for n, row in enumerate(rows(self, temps, skip)):
        if n == int(hold):
            threading.Event().wait()
        yield row
StreamCommit.rows = holding_rows
client = embedlog.connect(uri, name="doomed-driver")
opts = WriteOptions.parse({"metadataUri": uri, "maxOutstanding": "20"}, "write")
print("committing", flush=True)
StreamCommit(client, opts, int(stream)).commit(sink, int(batch), write_id, json.loads(temps))
print("committed", flush=True)
"""


def _temporaries(client: Any, stream: int, write_id: str, sink: str) -> list[tuple[int, int]]:
    out = []
    for part in range(2):
        wh = client.create_ledger(
            3, 3, 2, custom_metadata=temporary_metadata(stream, write_id, sink, 0, part, 0)
        )
        futures = [wh.add_async(b"p%d-%05d" % (part, i)) for i in range(ROWS_PER_TEMP)]
        for f in futures:
            f.result()
        wh.close()
        out.append((wh.ledger_id, ROWS_PER_TEMP))
    return out


def _kill_mid_commit(client: Any, metadata_uri: str, stream: int, sink: str, at: int) -> None:
    """Commit batch 0 of ``sink`` in a process of its own, SIGKILLed once the stream's
    last add confirmed reaches ``at`` (before ``at + HOLD`` rows are appended)."""
    first_temps = _temporaries(client, stream, "w1", sink)
    env = dict(os.environ, PYTHONPATH=str(_ROOT))
    driver = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _DRIVER,
            metadata_uri,
            str(stream),
            sink,
            "0",
            "w1",
            json.dumps(first_temps),
            str(at + HOLD),
        ],
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    follower = client.open_unbounded(stream, takeover=False)
    try:
        assert driver.stdout is not None and driver.stdout.readline().strip() == "committing"
        while follower.read_last_add_confirmed() < at:  # some of the rows are in
            assert driver.poll() is None, "the commit ended before it could be killed"
            time.sleep(0.01)
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    finally:
        follower.close()
    assert driver.returncode == -signal.SIGKILL


def test_a_commit_killed_mid_way_is_finished_by_the_replayed_batch(
    client: Any, metadata_uri: str
) -> None:
    ul = client.create_unbounded(3, 3, 2, name=f"crash-{uuid.uuid4().hex[:8]}")
    ul.append(b"before")
    ul.close()
    stream = ul.ledger_id
    sink = "query-crash-test"
    _kill_mid_commit(client, metadata_uri, stream, sink, 2_000)
    ((record, _),) = _records(client, stream).values()
    assert not record.done  # killed between its first and its last append

    # Spark replays batch 0 (its commit log never got it): new tasks, new temporaries.
    again = _temporaries(client, stream, "w2", sink)
    opts = WriteOptions.parse({"metadataUri": metadata_uri}, "write")
    outcome = StreamCommit(client, opts, stream).commit(sink, 0, "w2", again)
    assert outcome == "skip"
    f = client.open_unbounded(stream, takeover=False)
    try:
        got = [e.data for e in f.entries(0)]
    finally:
        f.close()
    expected = [b"p%d-%05d" % (p, i) for p in range(2) for i in range(ROWS_PER_TEMP)]
    assert len(got) == 1 + len(expected)
    assert got == [b"before", *expected]  # every row once, in partition order
    assert temporary_ledgers(client, stream) == {}
    ((record, _),) = _records(client, stream).values()
    assert record.done and record.batch == 0


@pytest.mark.parametrize("between", [False, True])
def test_with_retention_overriding_cursors_the_replay_counts_by_terms_or_says_what_to_do(
    client: Any, metadata_uri: str, between: bool
) -> None:
    ul = client.create_unbounded(
        3,
        3,
        2,
        name=f"crash-{uuid.uuid4().hex[:8]}",
        fragment_max_entries=500,
        retention=Retention(max_entries=1_000),
        retention_overrides_cursors=True,
    )
    ul.append(b"before")
    ul.close()
    stream = ul.ledger_id
    sink = "query-crash-overrides"
    _kill_mid_commit(client, metadata_uri, stream, sink, 2_500)
    ((record, _),) = _records(client, stream).values()
    assert not record.done
    # Retention went past the pin: the killed commit's first rows are gone.
    assert client.ledger_metadata(stream).fragments[0][0] > record.first
    if between:
        # Another writer took the stream over before the replay, and appended enough for
        # its retention to trim every row the killed commit appended.
        other = client.open_unbounded(stream, takeover=True)
        for f in [other.append_async(b"other-%05d" % i) for i in range(2_500)]:
            f.result()
        other.close()

    again = _temporaries(client, stream, "w2", sink)
    opts = WriteOptions.parse({"metadataUri": metadata_uri}, "write")
    total = 2 * ROWS_PER_TEMP
    if not between:
        # The first entry retention kept is one of the killed commit's rows: every id
        # between the record's first and it was that commit's too.
        assert StreamCommit(client, opts, stream).commit(sink, 0, "w2", again) == "skip"
        f = client.open_unbounded(stream, takeover=False)
        try:
            # One no-op between the killed term's rows and the rest: every row once.
            assert f.read_last_add_confirmed() == record.first + total
            assert f.read(f.read_last_add_confirmed(), f.read_last_add_confirmed())[0].data == (
                b"p1-%05d" % (ROWS_PER_TEMP - 1)
            )
        finally:
            f.close()
    else:
        with pytest.raises(StreamCommitError) as refused:
            StreamCommit(client, opts, stream).commit(sink, 0, "w2", again)
        message = str(refused.value)
        assert "retention_overrides_cursors=True" in message
        assert f"spark_connector.forget_sink(client, {stream}, {sink!r})" in message
        forget_sink(client, stream, sink)
        assert _records(client, stream) == {} and _pins(client, stream) == {}
        # Spark replays the batch: with the record gone it is appended whole.
        again = _temporaries(client, stream, "w3", sink)
        assert StreamCommit(client, opts, stream).commit(sink, 0, "w3", again) == "append"
    assert temporary_ledgers(client, stream) == {}
    ((record, _),) = _records(client, stream).values()
    assert record.done and _pins(client, stream) == {}


# -- a Spark driver killed inside a commit into a stream with retention --------------------

BATCH = 200  # rows of the batch whose commit is killed
LATER = 50  # rows of the batch after it
KEEP = 20  # the target stream's retention: entries
FRAGMENT = 10  # entries per fragment, so retention trims as the batch is appended
_HOOKS = Path(__file__).resolve().parent / "crash_hooks"


class Reader:
    """A consumer of the target stream: reads every entry as it comes and commits its
    cursor after each one, which lets retention trim what it has read (and only that)."""

    def __init__(self, client: Any, stream: int) -> None:
        self.handle = client.open_unbounded(stream, takeover=False)
        self.handle.commit("reader", -1)
        self.rows: list[bytes] = []
        self.tail = self.handle.tail(cursor="reader")
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for entry in self.tail:
            self.rows.append(entry.data)
            self.handle.commit("reader", entry.entry_id)

    def read_all(self) -> list[bytes]:
        """Everything up to the stream's last add confirmed now, then stop."""
        lac = self.handle.read_last_add_confirmed()
        while self.tail.position <= lac and self.thread.is_alive():
            time.sleep(0.05)
        self.stop()
        assert self.tail.skipped == 0  # the cursor kept every entry until it was read
        return self.rows

    def stop(self) -> None:
        self.tail.close()
        self.thread.join()
        self.handle.close()


def _pins(client: Any, stream: int) -> dict[str, int]:
    f = client.open_unbounded(stream, takeover=False)
    try:
        return {c: at for c, at in f.cursors().items() if c.startswith("spark-sink.")}
    finally:
        f.close()


POINTS = ("record", "before", "mid", "after", "unpin")  # crash_hooks/sitecustomize.py


class Copy:
    """A query copying stream ``copy-from-*`` into ``copy-to-*`` (with retention, read by
    a Reader) whose first commit the killed driver stops at ``point``."""

    def __init__(self, client: Any, point: str, tmp_path: Path) -> None:
        tag = uuid.uuid4().hex[:8]
        self.point = point
        self.source, self.target = f"copy-from-{tag}", f"copy-to-{tag}"
        self.src = client.create_unbounded(3, 3, 2, name=self.source)
        for f in [self.src.append_async(b"r-%05d" % i) for i in range(BATCH)]:
            f.result()
        dst = client.create_unbounded(
            3,
            3,
            2,
            name=self.target,
            fragment_max_entries=FRAGMENT,
            retention=Retention(max_entries=KEEP),
        )
        dst.close()
        self.target_id = dst.ledger_id
        self.ckpt = tmp_path / f"ckpt-{point}"
        self.reader = Reader(client, self.target_id)


@pytest.fixture
def copies(client: Any, tmp_path: Path) -> Iterator[list[Copy]]:
    made: list[Copy] = []
    try:
        for point in POINTS:
            made.append(Copy(client, point, tmp_path))
        yield made
    finally:
        for copy in made:
            copy.reader.stop()


def test_a_driver_killed_in_commits_into_streams_with_retention_loses_and_repeats_nothing(
    spark: Any, client: Any, metadata_uri: str, tmp_path: Path, copies: list[Copy]
) -> None:
    """One driver holds a commit stopped at each point of POINTS (each into a stream of its
    own) and is killed once, as a machine failure kills it: the checks after the kill see
    each commit's state at its point, and each query the test's session restarts from its
    checkpoint loses and repeats nothing."""
    started = time.monotonic()
    markers = tmp_path / "stopped"
    markers.mkdir()
    killed = _kill_in_commits(metadata_uri, tmp_path, copies, markers)
    print(f"driver killed {time.monotonic() - started:.1f} s after its start")
    assert len(killed) > 2  # the driver, its JVM, Spark's Python workers
    for copy in copies:
        _check_stopped(client, copy, (markers / str(copy.target_id)).read_text())
    for copy in copies:
        for f in [copy.src.append_async(b"r-%05d" % i) for i in range(BATCH, BATCH + LATER)]:
            f.result()
        copy.src.close()
    for copy in copies:
        _resume_and_check(spark, client, metadata_uri, copy)
    print(f"{len(copies)} queries checked in {time.monotonic() - started:.1f} s")


def _kill_in_commits(
    metadata_uri: str, tmp_path: Path, copies: list[Copy], markers: Path
) -> set[int]:
    """Start one driver, start its queries one after the other (each once the one before
    stopped: one commit at a time, as on a loaded machine Spark's Python workers are slow
    to connect back), and SIGKILL it with all of its processes once every commit stopped."""
    env = driver_env(str(_HOOKS))
    env.update(
        EMBEDLOG_CRASH_AT=json.dumps({str(c.target_id): c.point for c in copies}),
        EMBEDLOG_CRASH_MARKERS=str(markers),
        EMBEDLOG_CRASH_ROWS="150",
    )
    log = tmp_path / "driver.log"
    with log.open("w") as out:
        driver = subprocess.Popen(
            [sys.executable, sink_crash_driver.__file__, metadata_uri],
            env=env,
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    assert driver.stdin is not None
    started = time.monotonic()
    try:
        for copy in copies:
            driver.stdin.write(f"{copy.source} {copy.target} {copy.ckpt}\n")
            driver.stdin.flush()
            while not (markers / str(copy.target_id)).exists():
                assert driver.poll() is None, f"the driver ended: {log.read_text()[-3000:]}"
                time.sleep(0.05)
            print(f"{copy.point}: stopped {time.monotonic() - started:.1f} s after the start")
    finally:
        killed = kill_tree(driver)
        driver.stdin.close()
    assert driver.returncode == -signal.SIGKILL
    return killed


def _check_stopped(client: Any, copy: Copy, stopped: str) -> None:
    """The target's sink record, pin and temporaries as the commit left them at its point."""
    point, target_id = copy.point, copy.target_id
    if point == "record":
        # Pinned, the record not stored: the next commit drops the pin, which holds nothing.
        assert _records(client, target_id) == {}, stopped
        (pin,) = _pins(client, target_id)
        assert pin.startswith("spark-sink.query-"), stopped
        assert temporary_ledgers(client, target_id), stopped  # the tasks' ledgers, still there
        return
    ((sink, (record, _)),) = _records(client, target_id).items()
    assert record.batch == 0 and record.done == (point == "unpin"), (point, stopped)
    # The pin holds the batch's rows while the record is unfinished (retention has
    # trimmed what the reader had read before them, if anything).
    assert _pins(client, target_id) == {f"spark-sink.{sink}": record.first - 1}, stopped
    kept_from = client.ledger_metadata(target_id).fragments[0][0]
    assert kept_from <= record.first, stopped
    print(f"killed {stopped!r}: record from {record.first}, kept from {kept_from}")


def _resume_and_check(spark: Any, client: Any, metadata_uri: str, copy: Copy) -> None:
    """A new driver (this test's session) resumes the query from its checkpoint: it
    replays batch 0, then reads the rows appended since as batch 1."""
    query = sink_crash_driver.start(spark, metadata_uri, copy.source, copy.target, str(copy.ckpt))
    query.awaitTermination()  # type: ignore[attr-defined]
    assert query.exception() is None, copy.point  # type: ignore[attr-defined]

    counts = Counter(copy.reader.read_all())
    expected = Counter(b"r-%05d" % i for i in range(BATCH + LATER))
    assert counts == expected, (copy.point, counts - expected, expected - counts)  # each once
    assert temporary_ledgers(client, copy.target_id) == {}, copy.point
    ((record, _),) = _records(client, copy.target_id).values()
    assert record.done and record.batch == 1, copy.point
    assert _pins(client, copy.target_id) == {}, copy.point
    print(f"{copy.point}: {sum(counts.values())} rows checked")
