"""examples/: events appended by an application, counted per user and 10-second window by
the streaming job into a second stream. The job's driver (its own process: Python, the
JVM, Spark's Python workers) is killed with SIGKILL in the middle of a commit into the
second stream, the job is started again from its checkpoint, and the second stream holds
every window's final counts once."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[2]
_EXAMPLES = _ROOT / "examples"
if str(_EXAMPLES) not in sys.path:
    sys.path.insert(0, str(_EXAMPLES))

import aggregate_job  # noqa: E402
import events_app  # noqa: E402
from processes import driver_env, kill_tree  # noqa: E402

from spark_connector import temporary_ledgers  # noqa: E402
from spark_connector.stream_commit import _records  # noqa: E402

WINDOW_S = 10
LATENESS_S = 5


def expected_counts(events: int) -> list[str]:
    """The rows the job appends once events 0 .. ``events - 1`` are read: the counts of
    the windows the watermark (latest event time less the lateness) has passed."""
    times = [events_app.event(seq) for seq in range(events)]
    watermark = max(t for _, _, t in times) - LATENESS_S
    per_window = Counter((t - t % WINDOW_S, user) for user, _, t in times)
    return sorted(
        f"{start},{user},{n}"
        for (start, user), n in per_window.items()
        if start + WINDOW_S <= watermark
    )


def test_expected_counts_close_only_the_windows_the_watermark_passed() -> None:
    s = events_app.START
    # 30 events: times s .. s+29, watermark s+24: windows s and s+10 are closed.
    assert expected_counts(30) == sorted(
        f"{start},{user},{n}"
        for start, user, n in [
            (s, "ada", 4),
            (s, "bob", 3),
            (s, "cy", 3),
            (s + 10, "ada", 3),
            (s + 10, "bob", 4),
            (s + 10, "cy", 3),
        ]
    )


def _start_driver(uri: str, ckpt: Path, log: Path) -> subprocess.Popen[str]:
    env = driver_env()
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, str(_EXAMPLES / "aggregate_job.py"), uri, str(ckpt)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )


def _rows(client: Any, name: str) -> list[str]:
    f = client.open_unbounded(name, takeover=False)
    try:
        return [e.data.decode() for e in f.entries(0)]
    finally:
        f.close()


def _checkpoint_batches(ckpt: Path, log: str) -> list[int]:
    d = ckpt / log
    return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit()) if d.exists() else []


def test_window_counts_exact_after_the_driver_is_killed_mid_commit_and_restarted(
    spark: Any, zk_server: Any, tmp_path: Path
) -> None:
    from embedlog import LocalCluster
    from embedlog.errors import NoSuchLedgerInMetadataError

    uri = zk_server.uri(f"/example-{uuid.uuid4().hex[:8]}")
    ckpt = tmp_path / "ckpt"
    log = tmp_path / "driver.log"
    with LocalCluster(3, data_dir=tmp_path / "c", transport="tcp", metadata_uri=uri) as cluster:
        client = cluster.client("check")
        try:
            events_app.append_events(uri, 30)
            driver = _start_driver(uri, ckpt, log)
            try:

                def running() -> None:
                    assert driver.poll() is None, f"the job ended: {log.read_text()[-3000:]}"
                    # Not sooner: each look opens the stream, and the driver starting
                    # its JVM shares the machine's cores with this loop.
                    time.sleep(0.2)

                # Batch 0 reads events 0-29, the batch after it emits the two windows
                # the watermark passed.
                while True:
                    try:
                        if len(_rows(client, "counts")) >= 6:
                            break
                    except NoSuchLedgerInMetadataError:
                        pass
                    running()
                counts_id = client.runtime.run(client.stream_id_aio("counts"))
                ((sink, (first, _)),) = _records(client, counts_id).items()
                events_app.append_events(uri, 30, first=30)
                # Kill as soon as the commit of a later batch stored its record (before
                # its first append at the earliest, after its last at the latest). No
                # sleep: Spark writes its commit log some 0.2 s after the record, and the
                # JVM must be stopped before that for the batch to be replayed.
                while _records(client, counts_id)[sink][0].batch == first.batch:
                    assert driver.poll() is None, f"the job ended: {log.read_text()[-3000:]}"
            finally:
                killed = kill_tree(driver)
            record, _ = _records(client, counts_id)[sink]
            assert len(killed) > 2  # the driver, its JVM, Spark's Python workers
            assert driver.returncode == -signal.SIGKILL
            # Spark had not recorded the batch as done: it replays it on restart.
            assert record.batch not in _checkpoint_batches(ckpt, "commits")
            assert record.batch in _checkpoint_batches(ckpt, "offsets")
            print(f"killed in batch {record.batch}'s commit, record done: {record.done}")

            events_app.append_events(uri, 30, first=60)  # while the job is down
            # A new driver (this test's session) resumes the query from its checkpoint.
            query = aggregate_job.start(spark, uri, str(ckpt), once=True)
            query.awaitTermination()
            assert query.exception() is None

            rows = _rows(client, "counts")
            assert sorted(rows) == expected_counts(90)  # none lost, none doubled
            assert temporary_ledgers(client, counts_id) == {}
            ((record, _),) = _records(client, counts_id).values()
            assert record.done
        finally:
            client.close()
