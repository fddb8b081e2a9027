"""The connector's pieces driven directly, as Spark's workers drive them (no SparkSession)."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

from spark_connector import EmbedlogBatchReader, EmbedlogDataSource, OptionError
from spark_connector.options import ConnectionOptions, ReadOptions, WriteOptions


def test_metadata_uri_must_be_shareable_between_processes() -> None:
    for options in ({}, {"metadataUri": "memory://"}, {"metadataUri": "/tmp/x/metadata"}):
        with pytest.raises(OptionError, match="embedded LevelDB metadata store"):
            ConnectionOptions.parse(options)
    conn = ConnectionOptions.parse(
        {"metadatauri": "zk://127.0.0.1:2181/x", "PASSWORD": "pé", "requestTimeout": "2.5"}
    )
    assert (conn.password, conn.request_timeout) == ("pé".encode(), 2.5)


def test_option_parsing() -> None:
    uri = {"metadataUri": "zk://127.0.0.1:2181/x"}
    assert ReadOptions.parse({**uri, "ledgers": " 4,3,4 "}).ledgers == (4, 3)
    assert ReadOptions.parse(uri).ledgers is None
    for bad in ({"ledgers": ","}, {"ledgers": "-1"}, {"entriesPerPartition": "0"}):
        with pytest.raises(OptionError):
            ReadOptions.parse({**uri, **bad})
    w = WriteOptions.parse({**uri, "ensembleSize": "2", "digest": "mac"})
    assert (w.ensemble_size, w.write_quorum, w.ack_quorum, w.digest) == (2, 2, 2, "MAC")
    with pytest.raises(OptionError, match="digest"):
        WriteOptions.parse({**uri, "digest": "md5"})
    source = EmbedlogDataSource(uri)
    with pytest.raises(OptionError, match="binary or string"):
        source.writer(StructType([StructField("data", IntegerType())]), False)
    assert source.writer(StructType([StructField("DATA", BinaryType())]), False).data_index == 0


def test_read_over_tls_with_tls_ca(make_cluster: Any, zk_uri: str) -> None:
    cluster = make_cluster(3, transport="tcp", tls=True, metadata_uri=zk_uri)
    wh = cluster.client("w").create_ledger(3, 2, 2)
    for i in range(7):
        wh.add(b"t%d" % i)
    wh.close()
    reader = EmbedlogBatchReader(
        ReadOptions.parse(
            {
                "metadataUri": zk_uri,
                "tlsCa": str(cluster.transport.tls_ca),
                "ledgers": str(wh.ledger_id),
                "entriesPerPartition": "4",
                "readBatchSize": "3",
            }
        )
    )
    parts = reader.partitions()
    assert [(p.first, p.last) for p in parts] == [(0, 3), (4, 6)]
    rows = [row for p in parts for row in reader.read(p)]
    assert rows == [(wh.ledger_id, i, b"t%d" % i) for i in range(7)]


def test_batch_plan_and_read_of_an_unbounded_ledger(spark_cluster: Any, metadata_uri: str) -> None:
    # Followed without a takeover; the new writer's no-op is not a row.
    first = spark_cluster.client("ub1")
    second = spark_cluster.client("ub2")
    try:
        ul = first.create_unbounded(3, 3, 2)
        for i in range(3):
            ul.append(b"a%d" % i)
        ul.close()
        ul2 = second.open_unbounded(ul.ledger_id, takeover=True)
        later = [ul2.append(b"b%d" % i) for i in range(2)]
        ul2.close()  # sends the final LAC; the ledger stays open for the next writer
        reader = EmbedlogBatchReader(
            ReadOptions.parse({"metadataUri": metadata_uri, "ledgers": str(ul.ledger_id)})
        )
        (part,) = reader.partitions()
        assert (part.first, part.last) == (0, later[-1])
        rows = list(reader.read(part))
        expected = [(0, b"a0"), (1, b"a1"), (2, b"a2")] + [
            (eid, b"b%d" % i) for i, eid in enumerate(later)
        ]
        assert [(r[1], r[2]) for r in rows] == expected
        assert later[0] == 4  # entry 3 is the no-op
    finally:
        first.close()
        second.close()
