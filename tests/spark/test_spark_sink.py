"""Writes into an existing stream, batch and streaming, exactly once (sink.py, stream_sink.py)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from spark_connector import temporary_ledgers
from spark_connector.stream_commit import _records


def _stream(client: Any, entries: int = 0) -> Any:
    ul = client.create_unbounded(3, 3, 2, name=f"s-{uuid.uuid4().hex[:10]}")
    for i in range(entries):
        ul.append(b"before-%d" % i)
    return ul


def _contents(client: Any, lid: int) -> list[bytes]:
    f = client.open_unbounded(lid, takeover=False)
    try:
        return [e.data for e in f.entries(0)]
    finally:
        f.close()


def test_batch_write_appends_to_a_named_stream_in_partition_order(
    spark: Any, client: Any, metadata_uri: str
) -> None:
    ul = _stream(client, 2)
    stream_name = next(n for n, lid in client.list_streams().items() if lid == ul.ledger_id)
    df = spark.range(0, 90, numPartitions=3).selectExpr("format_string('r%02d', id) as data")
    df.write.format("embedlog").option("metadataUri", metadata_uri).option(
        "stream", stream_name
    ).mode("append").save()
    rows = [b"r%02d" % i for i in range(90)]
    # The writer before the commit was displaced (the commit took the stream over).
    assert _contents(client, ul.ledger_id) == [b"before-0", b"before-1", *rows]
    ul.close()
    # By id too; the temporary ledgers are gone and no record stays for a batch write.
    df.write.format("embedlog").option("metadataUri", metadata_uri).option(
        "ledger", str(ul.ledger_id)
    ).mode("append").save()
    assert _contents(client, ul.ledger_id) == [b"before-0", b"before-1", *rows, *rows]
    assert temporary_ledgers(client, ul.ledger_id) == {}
    assert _records(client, ul.ledger_id) == {}


def test_a_write_into_a_bounded_ledger_or_with_unknown_options_is_refused(
    spark: Any, client: Any, metadata_uri: str
) -> None:
    wh = client.create_ledger(3, 3, 2)
    df = spark.range(0, 3).selectExpr("cast(id as string) as data")
    with pytest.raises(Exception, match="is not a stream"):
        df.write.format("embedlog").option("metadataUri", metadata_uri).option(
            "ledger", str(wh.ledger_id)
        ).mode("append").save()
    with pytest.raises(Exception, match=r"(?i)unknown option\(s\) 'ensembleSise' for write"):
        df.write.format("embedlog").option("metadataUri", metadata_uri).option(
            "ensembleSise", "3"
        ).mode("append").save()
    with pytest.raises(Exception, match=r"(?i)unknown option\(s\) 'ledgerz' for read"):
        spark.read.format("embedlog").option("metadataUri", metadata_uri).option(
            "ledgerz", "1"
        ).load().collect()
    wh.close()


def test_a_failed_batch_write_leaves_nothing_in_the_stream_nor_temporaries(
    spark: Any, client: Any, metadata_uri: str
) -> None:
    from pyspark.sql.functions import udf

    ul = _stream(client, 1)

    @udf("string")
    def fail_on_77(x: int) -> str:
        if x == 77:
            raise ValueError("task failure on purpose")
        return f"v{x}"

    df = spark.range(0, 100, numPartitions=2).select(fail_on_77("id").alias("data"))
    with pytest.raises(Exception, match="task failure on purpose"):
        df.write.format("embedlog").option("metadataUri", metadata_uri).option(
            "ledger", str(ul.ledger_id)
        ).mode("append").save()
    assert _contents(client, ul.ledger_id) == [b"before-0"]
    assert temporary_ledgers(client, ul.ledger_id) == {}
    ul.close()


def test_streaming_sink_appends_each_batch_once_even_when_spark_replays_it(
    spark: Any, client: Any, metadata_uri: str, tmp_path: Path
) -> None:
    source = _stream(client)
    target = _stream(client)
    ckpt = tmp_path / "ckpt"

    def run() -> None:
        q = (
            spark.readStream.format("embedlog")
            .option("metadataUri", metadata_uri)
            .option("ledger", str(source.ledger_id))
            .load()
            .selectExpr("upper(cast(data as string)) as data")
            .writeStream.format("embedlog")
            .option("metadataUri", metadata_uri)
            .option("ledger", str(target.ledger_id))
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        assert q.exception() is None

    for i in range(10):
        source.append(b"a%d" % i)
    run()
    assert _contents(client, target.ledger_id) == [b"A%d" % i for i in range(10)]
    records = _records(client, target.ledger_id)
    ((sink, (record, _)),) = records.items()
    assert sink.startswith("query-") and record.done and record.total == 10

    # Spark replays a batch whose commit it did not record (as after a crash between the
    # sink's commit and its own commit log): the sink's record makes it a no-op.
    commits = sorted((ckpt / "commits").iterdir(), key=lambda p: p.name)
    last = [p for p in commits if p.name.isdigit()][-1]
    last.unlink()
    for crc in (ckpt / "commits").glob(f".{last.name}.crc"):
        crc.unlink()
    for i in range(10, 15):
        source.append(b"a%d" % i)
    run()
    assert _contents(client, target.ledger_id) == [b"A%d" % i for i in range(15)]
    assert temporary_ledgers(client, target.ledger_id) == {}
    source.close()
    target.close()


def test_a_streaming_aggregation_in_complete_or_update_mode_is_refused(
    spark: Any, client: Any, metadata_uri: str, tmp_path: Path
) -> None:
    from pyspark.errors import StreamingQueryException

    source = _stream(client)
    target = _stream(client)
    source.append(b"a")
    counts = (
        spark.readStream.format("embedlog")
        .option("metadataUri", metadata_uri)
        .option("ledger", str(source.ledger_id))
        .load()
        .groupBy("data")
        .count()
        .selectExpr("concat_ws(',', cast(data as string), cast(count as string)) as data")
    )
    refusals = {
        "complete": r"a stream is append-only: outputMode\('complete'\) would replace",
        "update": "embedlog does not support Update mode",  # Spark's own check
    }
    for mode, message in refusals.items():
        q = (
            counts.writeStream.format("embedlog")
            .outputMode(mode)
            .option("metadataUri", metadata_uri)
            .option("ledger", str(target.ledger_id))
            .option("checkpointLocation", str(tmp_path / mode))
            .trigger(availableNow=True)
            .start()
        )
        with pytest.raises(StreamingQueryException, match=message):
            q.awaitTermination()
    assert _contents(client, target.ledger_id) == []
    assert temporary_ledgers(client, target.ledger_id) == {}
    source.close()
    target.close()


def test_spark_own_writer_options_are_accepted_and_a_typo_is_refused_naming_the_option(
    spark: Any, client: Any, metadata_uri: str, tmp_path: Path
) -> None:
    source = _stream(client)
    target = _stream(client)
    for i in range(5):
        source.append(b"q%d" % i)

    def query(**options: str) -> Any:
        writer = (
            spark.readStream.format("embedlog")
            .option("metadataUri", metadata_uri)
            .option("ledger", str(source.ledger_id))
            .load()
            .select("data")
            .writeStream.format("embedlog")
            .queryName(f"q1_{uuid.uuid4().hex[:6]}")  # Spark passes it as option queryName
            .option("metadataUri", metadata_uri)
            .option("ledger", str(target.ledger_id))
            .option("checkpointLocation", str(tmp_path / uuid.uuid4().hex))
            .options(**options)
            .trigger(availableNow=True)
        )
        return writer.start(str(tmp_path / "ignored"))  # and start(path) as option path

    q = query()
    q.awaitTermination()
    assert q.exception() is None
    assert _contents(client, target.ledger_id) == [b"q%d" % i for i in range(5)]

    with pytest.raises(
        Exception,
        match=r"unknown option\(s\) 'maxoutstandng' for writeStream "
        r"\('maxoutstandng': did you mean 'maxOutstanding'\?\); writeStream knows: metadataUri",
    ):
        query(maxOutstandng="5").awaitTermination()
    assert _contents(client, target.ledger_id) == [b"q%d" % i for i in range(5)]
    source.close()
    target.close()
