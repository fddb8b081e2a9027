"""A sink commit into a stream leaves no moment in which its record stands unpinned.

The driver that commits a batch into a stream stores a sink record (what it appends,
from which entry) and pins the stream (a cursor, so retention keeps the rows it needs to
count on a replay). A driver that dies between the two steps must leave a state the
replay can finish, even when another writer appends past the retention limit before the
replay comes. The driver's death is made here at the commit's second step, whichever
that is; the SIGKILL test with real Spark is tests/spark/test_spark_driver_crash.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from embedlog import Retention
from spark_connector import pins
from spark_connector import stream_commit as sc
from spark_connector.options import WriteOptions


class DriverKilled(Exception):
    """Where the driver's process would have died."""


def _temps(client: Any, stream_id: int, write_id: str) -> list[tuple[int, int]]:
    """Two partitions of 30 rows each, as the Spark tasks leave them."""
    out = []
    for part in range(2):
        meta = sc.temporary_metadata(stream_id, write_id, "query-x", 0, part, 0)
        wh = client.create_ledger(3, 3, 2, custom_metadata=meta)
        for i in range(30):
            wh.add(b"p%d-%02d" % (part, i))
        wh.close()
        out.append((wh.ledger_id, 30))
    return out


def _target(client: Any, metadata_uri: str) -> tuple[int, WriteOptions]:
    """A stream with tight retention to commit into (one entry in it), and the options."""
    ul = client.create_unbounded(
        3, 3, 2, fragment_max_entries=10, retention=Retention(max_entries=20)
    )
    ul.append(b"before")
    ul.close()
    return ul.ledger_id, WriteOptions.parse({"metadataUri": metadata_uri}, "write")


def _app_writes_past_the_limit_then_a_reader(client: Any, sid: int) -> tuple[Any, int]:
    """The application's own writer takes the stream over and appends far past its
    retention limit; then a consumer reads all of it and commits its cursor there, so
    retention keeps what comes after. (the consumer's handle, its cursor)"""
    other = client.open_unbounded(sid)
    for i in range(100):
        other.append(b"app-%03d" % i)
    other.close()
    reader = client.open_unbounded(sid, takeover=False)
    seen = reader.last_add_confirmed
    reader.commit("reader", seen)
    return reader, seen


def test_a_driver_killed_between_the_record_and_the_pin_leaves_a_replay_that_lands(
    client: Any, metadata_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid, opts = _target(client, metadata_uri)

    steps: list[str] = []
    real_pin, real_store = pins.pin, sc._store

    def step(name: str, real: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            steps.append(name)
            if len(steps) == 2:  # the second of the two: the first one was made
                raise DriverKilled(f"the driver died at its {name}, after its {steps[0]}")
            return real(*args, **kwargs)

        return run

    monkeypatch.setattr(pins, "pin", step("pin", real_pin))
    monkeypatch.setattr(sc, "_store", step("record", real_store))
    with pytest.raises(DriverKilled):
        sc.StreamCommit(client, opts, sid).commit("query-x", 0, "w1", _temps(client, sid, "w1"))
    monkeypatch.undo()

    reader, seen = _app_writes_past_the_limit_then_a_reader(client, sid)

    # Spark replays the batch, then goes on with the next one.
    assert sc.StreamCommit(client, opts, sid).commit("query-x", 0, "w2", _temps(client, sid, "w2"))
    assert (
        sc.StreamCommit(client, opts, sid).commit("query-x", 1, "w3", _temps(client, sid, "w3"))
        == "append"
    )
    rows = [e.data for e in reader.entries(seen + 1)]
    one_batch = [b"p%d-%02d" % (p, i) for p in range(2) for i in range(30)]
    assert rows == one_batch + one_batch  # batch 0 once (the replay), then batch 1
    assert {s: r.done for s, (r, _) in sc._records(client, sid).items()} == {"query-x": True}
    assert set(reader.cursors()) == {"reader"}  # no pin left behind


def test_a_commit_whose_first_pin_another_commits_cleanup_took_keeps_its_record_pinned(
    client: Any, metadata_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Driver A pins; driver B's commit into the stream (another sink) takes the stream
    over and, finding A's pin without a record, drops it; A stores its record and goes on
    (its appends fail: B took the stream over). A's replay must still count its rows
    after another writer appended past the limit: A's record must be pinned."""
    sid, opts = _target(client, metadata_uri)
    real_pin = pins.pin
    other_commit = []

    def pin_then_other_commit(ul: Any, sink: str, first: int) -> None:
        real_pin(ul, sink, first)
        if sink == "query-a" and not other_commit:
            other_commit.append(
                sc.StreamCommit(client, opts, sid).commit(
                    "query-b", 0, "b0", _temps(client, sid, "b0")
                )
            )

    monkeypatch.setattr(pins, "pin", pin_then_other_commit)
    with pytest.raises(Exception):  # noqa: B017 - A's appends meet B's takeover
        sc.StreamCommit(client, opts, sid).commit("query-a", 0, "a0", _temps(client, sid, "a0"))
    monkeypatch.undo()
    assert other_commit == ["append"]
    records = sc._records(client, sid)
    assert not records["query-a"][0].done
    f = client.open_unbounded(sid, takeover=False)
    assert pins.pin_name("query-a") in f.cursors()  # the record is pinned

    reader, seen = _app_writes_past_the_limit_then_a_reader(client, sid)
    assert sc.StreamCommit(client, opts, sid).commit("query-a", 0, "a1", _temps(client, sid, "a1"))
    rows = [e.data for e in reader.entries(seen + 1)]
    one_batch = [b"p%d-%02d" % (p, i) for p in range(2) for i in range(30)]
    assert rows == one_batch  # A's batch, once: none of it had landed
    assert {s: r.done for s, (r, _) in sc._records(client, sid).items()} == {
        "query-a": True,
        "query-b": True,
    }
