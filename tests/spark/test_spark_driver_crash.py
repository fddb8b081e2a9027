"""A commit into a stream whose process is killed (SIGKILL) half-way through its appends:
the next commit finishes it, and the replayed batch is not appended again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from spark_connector import temporary_ledgers
from spark_connector.options import WriteOptions
from spark_connector.stream_commit import StreamCommit, _records, temporary_metadata

ROWS_PER_TEMP = 12_000
_ROOT = Path(__file__).resolve().parents[2]

_DRIVER = """
import json, sys
import embedlog
from spark_connector.options import WriteOptions
from spark_connector.stream_commit import StreamCommit
uri, stream, sink, batch, write_id, temps = sys.argv[1:]
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


def test_a_commit_killed_mid_way_is_finished_by_the_replayed_batch(
    client: Any, metadata_uri: str
) -> None:
    ul = client.create_unbounded(3, 3, 2, name=f"crash-{uuid.uuid4().hex[:8]}")
    ul.append(b"before")
    ul.close()
    stream = ul.ledger_id
    sink = "query-crash-test"
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
        ],
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    follower = client.open_unbounded(stream, takeover=False)
    try:
        assert driver.stdout is not None and driver.stdout.readline().strip() == "committing"
        while follower.read_last_add_confirmed() < 2_000:  # some of the rows are in
            assert driver.poll() is None, "the commit ended before it could be killed"
            time.sleep(0.01)
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    finally:
        follower.close()
    assert driver.returncode == -signal.SIGKILL
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
