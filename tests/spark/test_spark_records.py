"""Stream records through Spark: the timestamp, key and headers columns on read, the
startingTimestamp/endingTimestamp options, and the columns a write stores (records.py)."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_connector import EmbedlogBatchReader, OptionError, temporary_ledgers
from spark_connector.options import ReadOptions, StreamOptions
from spark_connector.records import NONE, Fields, RecordColumns, pack, unpack

T0 = 1_767_225_600.25  # 2026-01-01T00:00:00.25Z
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _when(seconds: float) -> datetime:
    return EPOCH + timedelta(microseconds=round(seconds * 1_000_000))


def _ms(seconds: float) -> str:
    return str(round(seconds * 1000))


def _utc(value: datetime | None) -> datetime | None:
    """A timestamp column's value as PySpark gives it (a naive local time) in UTC."""
    if value is None:
        return None
    return value.astimezone(UTC) if value.tzinfo is None else value


def _records_of(client: Any, lid: int) -> list[tuple[bytes, float | None, bytes | None, dict]]:
    f = client.open_unbounded(lid, takeover=False)
    try:
        return [(e.data, e.timestamp, e.key, dict(e.headers)) for e in f.entries(0)]
    finally:
        f.close()


def test_records_read_written_and_sought_by_time_with_spark(
    spark: Any, client: Any, metadata_uri: str, tmp_path: Path
) -> None:
    name = f"rec-{uuid.uuid4().hex[:8]}"
    ul = client.create_unbounded(3, 3, 2, name=name, fragment_max_entries=4)
    # Entries 0-9 one second apart, with keys and headers on some; entry 10 takes the
    # writer's clock and carries nothing else.
    for i in range(10):
        ul.append(
            b"v%d" % i,
            timestamp=T0 + i + 0.000001 * i,
            key=b"k%d" % (i % 3) if i % 2 == 0 else None,
            headers={"n": b"%d" % i, "kind": b"even"} if i % 2 == 0 else None,
        )
    before = time.time()
    ul.append(b"now")
    wh = client.create_ledger(3, 3, 2)
    for i in range(2):
        wh.add(b"b%d" % i)
    wh.close()

    def read(**options: str) -> Any:
        return spark.read.format("embedlog").option("metadataUri", metadata_uri).options(**options)

    # -- reading: the columns after today's, typed as a Kafka user expects --------------
    df = read(stream=name).load()
    assert df.columns == ["ledger_id", "entry_id", "data", "timestamp", "key", "headers"]
    types = [f.dataType for f in df.schema.fields]
    assert types[3:] == [TimestampType(), BinaryType(), MapType(StringType(), BinaryType())]
    rows = sorted(df.collect(), key=lambda r: r.entry_id)
    assert [(r.entry_id, bytes(r.data)) for r in rows] == [(i, b"v%d" % i) for i in range(10)] + [
        (10, b"now")
    ]
    for i, r in enumerate(rows[:10]):
        assert _utc(r.timestamp) == _when(T0 + i + 0.000001 * i)  # to the microsecond
        assert (bytes(r.key) if r.key is not None else None) == (
            b"k%d" % (i % 3) if i % 2 == 0 else None
        )
        assert {k: bytes(v) for k, v in r.headers.items()} == (
            {"n": b"%d" % i, "kind": b"even"} if i % 2 == 0 else {}
        )
    now = _utc(rows[10].timestamp)
    assert now is not None and before - 5 <= now.timestamp() <= time.time()
    assert (rows[10].key, rows[10].headers) == (None, {})
    # In SQL as in Kafka's source: headers['name'], filters on time and key.
    picked = (
        read(stream=name)
        .load()
        .where(f"timestamp >= timestamp_millis({_ms(T0 + 4)}) and key is not null")
        .selectExpr("entry_id", "cast(headers['n'] as string) as n")
        .orderBy("entry_id")
        .collect()
    )
    assert [(r.entry_id, r.n) for r in picked] == [(4, "4"), (6, "6"), (8, "8")]
    # A bounded ledger's entries are bare bytes: no time, no key, no headers.
    bounded = read(ledgers=str(wh.ledger_id)).load().collect()
    assert sorted((r.entry_id, r.timestamp, r.key, r.headers) for r in bounded) == [
        (0, None, None, {}),
        (1, None, None, {}),
    ]

    # -- startingTimestamp / endingTimestamp (milliseconds): batch ------------------------
    def ids(df: Any) -> list[int]:
        return sorted(r.entry_id for r in df.select("entry_id").collect())

    assert ids(read(stream=name, startingTimestamp=_ms(T0 + 6.5)).load()) == [7, 8, 9, 10]
    assert ids(
        read(stream=name, startingTimestamp=_ms(T0 + 2), endingTimestamp=_ms(T0 + 5)).load()
    ) == [2, 3, 4]
    assert ids(read(stream=name, startingTimestamp=_ms(time.time() + 3600)).load()) == []
    with pytest.raises(Exception, match="'startingOffsets' and 'startingTimestamp' both say"):
        read(stream=name, startingTimestamp="0", startingOffsets="earliest").load().collect()
    with pytest.raises(Exception, match=f"ledger {wh.ledger_id} is a bounded ledger"):
        read(ledgers=f"{name},{wh.ledger_id}", startingTimestamp=_ms(T0)).load().collect()

    # -- startingTimestamp: streaming, into the streaming sink with the record columns ----
    target = client.create_unbounded(3, 3, 2, name=f"copy-{uuid.uuid4().hex[:8]}")
    query = (
        spark.readStream.format("embedlog")
        .option("metadataUri", metadata_uri)
        .option("stream", name)
        .option("startingTimestamp", _ms(T0 + 5))
        .load()
        .selectExpr("upper(cast(data as string)) as data", "key", "headers", "timestamp")
        .writeStream.format("embedlog")
        .option("metadataUri", metadata_uri)
        .option("ledger", str(target.ledger_id))
        .option("checkpointLocation", str(tmp_path / "copy"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    source = _records_of(client, ul.ledger_id)
    copied = _records_of(client, target.ledger_id)
    assert copied == [(d.upper(), t, k, h) for d, t, k, h in source[5:]]
    assert temporary_ledgers(client, target.ledger_id) == {}

    # -- a batch write with key (string), Kafka-shaped headers, timestamp, some null ------
    schema = StructType(
        [
            StructField("data", StringType()),
            StructField("key", StringType()),
            StructField(
                "headers",
                ArrayType(
                    StructType(
                        [StructField("key", StringType()), StructField("value", BinaryType())]
                    )
                ),
            ),
            StructField("timestamp", TimestampType()),
        ]
    )
    data = [
        ("a", "user-1", [("trace", b"t1"), ("type", b"click")], _when(T0 + 100)),
        ("b", None, None, None),
        ("c", "", [], _when(T0 + 0.000001)),
    ]
    out = client.create_unbounded(3, 3, 2, name=f"out-{uuid.uuid4().hex[:8]}")
    written_from = time.time()
    spark.createDataFrame(data, schema).coalesce(1).write.format("embedlog").option(
        "metadataUri", metadata_uri
    ).option("ledger", str(out.ledger_id)).mode("append").save()
    got = _records_of(client, out.ledger_id)
    assert got[0] == (b"a", T0 + 100, b"user-1", {"trace": b"t1", "type": b"click"})
    assert got[1][0] == b"b" and got[1][2:] == (None, {})
    assert got[1][1] is not None and written_from - 5 <= got[1][1] <= time.time()
    assert got[2] == (b"c", T0 + 0.000001, b"", {})
    # ... and Spark reads them back as they were written.
    back = sorted(read(ledger=str(out.ledger_id)).load().collect(), key=lambda r: r.entry_id)
    assert [(bytes(r.data), _utc(r.timestamp), r.key) for r in back][::2] == [
        (b"a", _when(T0 + 100), b"user-1"),
        (b"c", _when(T0 + 0.000001), b""),
    ]
    # A column of a wrong type fails the write when it is planned, and appends nothing.
    with pytest.raises(Exception, match="column 'key' must be binary or string, not int"):
        spark.range(1).selectExpr("'x' as data", "1 as key").write.format("embedlog").option(
            "metadataUri", metadata_uri
        ).option("ledger", str(out.ledger_id)).mode("append").save()
    assert len(_records_of(client, out.ledger_id)) == 3
    for handle in (ul, target, out):
        handle.close()


def test_record_columns_and_the_temporary_entry_format() -> None:
    # What a write accepts, checked when it is planned.
    def columns(*fields: StructField) -> RecordColumns:
        return RecordColumns(StructType([StructField("data", BinaryType()), *fields]))

    assert not columns().any
    kafka_headers = ArrayType(
        StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    )
    both = columns(
        StructField("KEY", BinaryType()),
        StructField("headers", kafka_headers),
        StructField("timestamp", TimestampType()),
    )
    assert both.index == {"key": 1, "headers": 2, "timestamp": 3}
    refused = {
        StructField("key", IntegerType()): "column 'key' must be binary or string, not int",
        StructField("headers", MapType(StringType(), LongType())): "column 'headers' must be map",
        StructField("headers", ArrayType(StringType())): "column 'headers' must be map",
        StructField("timestamp", LongType()): "column 'timestamp' must be timestamp, not bigint",
    }
    for field, message in refused.items():
        with pytest.raises(OptionError, match=message):
            columns(field)

    # A row's fields, as ul.append checks them: a bad one fails the task.
    row = (b"d", "k", [("a", b"1"), ("b", "2")], datetime(2026, 1, 1, tzinfo=UTC))
    assert both.fields(row) == Fields(b"k", {"a": b"1", "b": b"2"}, T0 - 0.25)
    assert both.fields((b"d", None, None, None)) is NONE
    for headers, message in (
        ([("a", b"1"), ("a", b"2")], "header 'a' appears twice"),
        ([("a", None)], "header 'a' in column 'headers' is null"),
    ):
        with pytest.raises(ValueError, match=message):
            both.fields((b"d", None, headers, None))
    with pytest.raises(ValueError, match="a key holds at most 1024 bytes"):
        both.fields((b"d", b"x" * 1025, None, None))

    # The temporary entry keeps them, and says when the timestamp is the writer's to give.
    for fields in (NONE, Fields(b"", {"h": b"v"}, T0), Fields(None, {}, 0.0)):
        data, back = unpack(pack(b"payload", fields))
        assert (data, back.key, dict(back.headers), back.timestamp) == (
            b"payload",
            fields.key,
            dict(fields.headers),
            fields.timestamp,
        )


def test_timestamp_options(client: Any, metadata_uri: str) -> None:
    uri = {"metadataUri": metadata_uri}
    opts = ReadOptions.parse(
        {
            **uri,
            "stream": "s",
            "startingTimestamp": "1767225600000",
            "endingTimestamp": "1767225601000",
        }
    )
    assert (opts.starting_ms, opts.ending_ms) == (1_767_225_600_000, 1_767_225_601_000)
    assert StreamOptions.parse({**uri, "stream": "s", "startingtimestamp": "5"}).starting_ms == 5
    refused = {
        "'startingOffsets' and 'startingTimestamp' both say where the read starts": {
            "stream": "s",
            "startingTimestamp": "5",
            "startingOffsets": '{"s": 1}',
        },
        "'endingOffsets' and 'endingTimestamp' both say where the read ends": {
            "stream": "s",
            "endingTimestamp": "5",
            "endingOffsets": "latest",
        },
        "must be milliseconds since the epoch .* got '2026-01-01'": {
            "stream": "s",
            "startingTimestamp": "2026-01-01",
        },
        "endingTimestamp 4 is before startingTimestamp 5": {
            "stream": "s",
            "startingTimestamp": "5",
            "endingTimestamp": "4",
        },
        "need the streams named": {"startingTimestamp": "5"},
    }
    for message, options in refused.items():
        with pytest.raises(OptionError, match=message):
            ReadOptions.parse({**uri, **options})
    with pytest.raises(OptionError, match="'startingOffsets' and 'startingTimestamp'"):
        StreamOptions.parse(
            {**uri, "stream": "s", "startingTimestamp": "5", "startingOffsets": "latest"}
        )
    # Resolved per ledger when planned: a bounded ledger has no times to search.
    wh = client.create_ledger(3, 3, 2)
    wh.add(b"x")
    wh.close()
    reader = EmbedlogBatchReader(
        ReadOptions.parse({**uri, "ledgers": str(wh.ledger_id), "endingTimestamp": "5"})
    )
    with pytest.raises(OptionError, match=r"'endingTimestamp': ledger \d+ is a bounded ledger"):
        reader.partitions()
