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
