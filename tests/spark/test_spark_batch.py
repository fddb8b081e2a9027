"""Batch read and write through Spark against a TCP cluster with ZooKeeper metadata."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from embedlog import LedgerState
from spark_connector import EmbedlogBatchReader
from spark_connector.options import ReadOptions


def _write_ledger(client: Any, payloads: list[bytes], *, close: bool = True, **kw: Any) -> int:
    wh = client.create_ledger(3, 2, 2, **kw)
    futures = [wh.add_async(p) for p in payloads]
    for f in futures:
        f.result()
    if close:
        wh.close()
    return int(wh.ledger_id)


def _rows(df: Any) -> list[tuple[int, int, bytes]]:
    return sorted((r.ledger_id, r.entry_id, bytes(r.data)) for r in df.collect())


def test_batch_read_several_ledgers_exact_content(
    spark: Any, client: Any, metadata_uri: str
) -> None:
    a = [b"a-%d" % i for i in range(25)]
    b = [bytes([i % 256]) * (i % 7) for i in range(40)]  # includes empty entries
    c = [b"c-%d" % i for i in range(5)]
    la, lb, lc = (_write_ledger(client, p) for p in (a, b, c))
    # An open ledger is read up to the LAC its bookies confirm, without fencing the writer.
    wo = client.create_ledger(3, 3, 2)
    for i in range(6):
        wo.add(b"open-%d" % i)

    options = {
        "metadataUri": metadata_uri,
        "ledgers": f"{la},{lb}, {wo.ledger_id}",
        "entriesPerPartition": "10",  # several partitions per ledger
    }
    df = spark.read.format("embedlog").options(**options).load()
    assert df.schema.simpleString() == (
        "struct<ledger_id:bigint,entry_id:bigint,data:binary,"
        "timestamp:timestamp,key:binary,headers:map<string,binary>>"
    )
    parts = EmbedlogBatchReader(ReadOptions.parse(options)).partitions()
    ranges = [(p.ledger_id, p.first, p.last) for p in parts]
    assert ranges[:3] == [(la, 0, 9), (la, 10, 19), (la, 20, 24)]
    assert ranges[3:7] == [(lb, 0, 9), (lb, 10, 19), (lb, 20, 29), (lb, 30, 39)]
    assert ranges[7][:2] == (wo.ledger_id, 0) and ranges[7][2] >= 4

    expected = [(la, i, p) for i, p in enumerate(a)] + [(lb, i, p) for i, p in enumerate(b)]
    rows = _rows(df)
    open_rows = [r for r in rows if r[0] == wo.ledger_id]
    assert [r for r in rows if r[0] != wo.ledger_id] == sorted(expected)
    assert open_rows == [(wo.ledger_id, i, b"open-%d" % i) for i in range(len(open_rows))]
    assert len(open_rows) >= 5  # all but possibly the last, whose LAC may lag
    assert client.ledger_metadata(wo.ledger_id).state is LedgerState.OPEN
    assert wo.add(b"still writable") == 6
    wo.close()

    # No `ledgers` option: every ledger.
    everything = spark.read.format("embedlog").option("metadataUri", metadata_uri).load()
    counts = Counter(r.ledger_id for r in everything.select("ledger_id").collect())
    assert counts[la] == 25 and counts[lb] == 40 and counts[lc] == 5
    assert counts[wo.ledger_id] == 7


def test_batch_read_with_password_and_recover(spark: Any, client: Any, metadata_uri: str) -> None:
    wh = client.create_ledger(3, 3, 2, password=b"s3cret")
    for i in range(3):
        wh.add(b"p%d" % i)
    base = spark.read.format("embedlog").option("metadataUri", metadata_uri)
    base = base.option("ledgers", str(wh.ledger_id))
    with pytest.raises(Exception, match=r"(?i)unauthori|password"):
        base.load().collect()
    rows = _rows(base.option("password", "s3cret").option("recover", "true").load())
    assert rows == [(wh.ledger_id, i, b"p%d" % i) for i in range(3)]
    md = client.ledger_metadata(wh.ledger_id)
    assert md.state is LedgerState.CLOSED and md.last_entry_id == 2
    # Reading every ledger takes one password: leave none with another for later tests.
    client.delete_ledger(wh.ledger_id)


def test_batch_read_empty_ledger(spark: Any, client: Any, metadata_uri: str) -> None:
    lid = _write_ledger(client, [])
    df = (
        spark.read.format("embedlog")
        .option("metadataUri", metadata_uri)
        .option("ledgers", str(lid))
        .load()
    )
    assert df.collect() == []


def test_bad_options_fail_at_planning(spark: Any, metadata_uri: str) -> None:
    with pytest.raises(Exception, match="metadataUri"):
        spark.read.format("embedlog").load().collect()
    with pytest.raises(Exception, match="ledger ids are >= 0"):
        spark.read.format("embedlog").option("metadataUri", metadata_uri).option(
            "ledgers", "-3"
        ).load().collect()
    # A name that is no stream's fails the query, as a missing ledger id does.
    with pytest.raises(Exception, match="there is no stream named 'x'"):
        spark.read.format("embedlog").option("metadataUri", metadata_uri).option(
            "ledgers", "x"
        ).load().collect()
