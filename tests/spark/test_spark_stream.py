"""spark.readStream.format("embedlog"): following a ledger as its writer adds entries."""

from __future__ import annotations

import ast
import time
import uuid
from typing import Any

import pytest

from spark_connector import EmbedlogStreamReader, LedgerRange, OptionError
from spark_connector.options import StreamOptions
from spark_connector.source import READ_LIMITS  # PySpark >= 4.2


def wait_confirmed(view: Any, last: int) -> None:
    """Until a reader sees ``last`` confirmed (the writer sends an idle LAC within 0.2 s)."""
    while view.read_last_add_confirmed() < last:
        time.sleep(0.05)


def _sink_rows(spark: Any, name: str) -> list[tuple[int, int, bytes]]:
    rows = spark.sql(f"select * from {name}").collect()
    return sorted((r.ledger_id, r.entry_id, bytes(r.data)) for r in rows)


def test_stream_follows_an_open_ledger_between_batches(
    spark: Any, client: Any, metadata_uri: str, tmp_path: Any
) -> None:
    wh = client.create_ledger(3, 3, 2)
    lid = wh.ledger_id
    follower = client.open_ledger(lid, recover=False)
    for i in range(10):
        wh.add(b"e%d" % i)
    wait_confirmed(follower, 9)

    name = f"s_{uuid.uuid4().hex[:8]}"
    query = (
        spark.readStream.format("embedlog")
        .option("metadataUri", metadata_uri)
        .option("ledger", str(lid))
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    try:
        query.processAllAvailable()
        assert _sink_rows(spark, name) == [(lid, i, b"e%d" % i) for i in range(10)]

        # Entries appended while the query runs arrive in later batches.
        for i in range(10, 17):
            wh.add(b"e%d" % i)
        wait_confirmed(follower, 16)
        query.processAllAvailable()
        assert _sink_rows(spark, name) == [(lid, i, b"e%d" % i) for i in range(17)]

        wh.add(b"e17")
        wh.close()  # closed: the stream ends at its last entry
        query.processAllAvailable()
        assert _sink_rows(spark, name) == [(lid, i, b"e%d" % i) for i in range(18)]
        # {ledger id: next entry id}; progress shows it as JSON (PySpark 4.0: as a dict's repr)
        last = query.recentProgress[-1]["sources"][0]["endOffset"]
        assert ast.literal_eval(str(last)) == {str(lid): 18}
    finally:
        query.stop()


def test_stream_unbounded_ledger_available_now_resumes_from_checkpoint(
    spark: Any, spark_cluster: Any, metadata_uri: str, tmp_path: Any
) -> None:
    writer = spark_cluster.client(f"uw-{uuid.uuid4().hex[:6]}")
    other = spark_cluster.client(f"uo-{uuid.uuid4().hex[:6]}")
    try:
        ul = writer.create_unbounded(3, 3, 2)
        lid = ul.ledger_id
        for i in range(8):
            ul.append(b"u%d" % i)
        follower = other.open_unbounded(lid, takeover=False)
        wait_confirmed(follower, 7)
        ckpt, out = str(tmp_path / "ckpt"), str(tmp_path / "out")

        def run() -> Any:
            reader = spark.readStream.format("embedlog").option("metadataUri", metadata_uri)
            if READ_LIMITS:
                reader = reader.option("maxEntriesPerTrigger", "3")
            query = (
                reader.option("ledger", str(lid))
                .load()
                .writeStream.format("parquet")  # a sink that resumes from its checkpoint
                .option("path", out)
                .option("checkpointLocation", ckpt)
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            assert query.exception() is None
            return query

        def output() -> list[tuple[int, int, bytes]]:
            rows = spark.read.parquet(out).collect()
            return sorted((r.ledger_id, r.entry_id, bytes(r.data)) for r in rows)

        query = run()
        assert output() == [(lid, i, b"u%d" % i) for i in range(8)]
        batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]
        assert batches == ([3, 3, 2] if READ_LIMITS else [8])

        # A new writer takes the stream over (its truncate no-op is not data) and appends;
        # the query restarted on the same checkpoint reads only what is new.
        ul.close()
        ul2 = other.open_unbounded(lid, takeover=True)
        new_ids = [ul2.append(b"v%d" % i) for i in range(4)]
        assert new_ids[0] > 8  # the no-op took an id
        wait_confirmed(follower, new_ids[-1])
        query = run()
        assert output() == [(lid, i, b"u%d" % i) for i in range(8)] + [
            (lid, eid, b"v%d" % i) for i, eid in enumerate(new_ids)
        ]
        assert sum(p["numInputRows"] for p in query.recentProgress) == 4
        ul2.close()
    finally:
        writer.close()
        other.close()


def test_stream_offsets_without_spark(client: Any, metadata_uri: str) -> None:
    # The offset logic, driven the way Spark drives it (no session needed).
    wh = client.create_ledger(3, 3, 2)
    lid = wh.ledger_id
    for i in range(5):
        wh.add(b"x%d" % i)
    wh.close()
    key = str(lid)

    def reader(**opts: str) -> EmbedlogStreamReader:
        return EmbedlogStreamReader(
            StreamOptions.parse({"metadataUri": metadata_uri, "ledger": key, **opts})
        )

    r = reader()
    try:
        assert r.initialOffset() == {key: 0}
        assert r.latestOffset() == {key: 5}  # PySpark 4.0/4.1 call it so
        if READ_LIMITS:
            from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

            assert r.latestOffset({key: 1}, ReadMaxRows(3)) == {key: 4}
            assert r.latestOffset({key: 4}, ReadAllAvailable()) == {key: 5}
        parts = r.partitions({key: 1}, {key: 4})
        assert [(p.ledger_id, p.first, p.last) for p in parts] == [(lid, 1, 3)]
        assert r.partitions({key: 5}, {key: 5}) == []
        assert [row[2] for row in r.read(LedgerRange(lid, 1, 3))] == [b"x1", b"x2", b"x3"]
    finally:
        r.stop()
    r = reader(startingOffsets="latest")
    try:
        assert r.initialOffset() == {key: 5}
    finally:
        r.stop()
    r = reader(startingOffsets=f'{{"{lid}": 3}}')
    assert r.initialOffset() == {key: 3}
    r.stop()
    # Offsets are checked against the query's ledgers once names are resolved.
    for bad, message in (('{"999999": 1}', "which the query does not read"), ("{}", "no offset")):
        r = reader(startingOffsets=bad)
        try:
            with pytest.raises(OptionError, match=message):
                r.initialOffset()
        finally:
            r.stop()
    with pytest.raises(OptionError, match=r"needs option 'stream'.* or 'ledger'"):
        StreamOptions.parse({"metadataUri": metadata_uri})
