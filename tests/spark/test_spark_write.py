"""df.write.format("embedlog"): each partition becomes one new closed ledger."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from embedlog import DigestType, LedgerState, NoSuchLedgerError
from spark_connector import EmbedlogCommitMessage, EmbedlogWriter, ledgers_with
from spark_connector.options import WriteOptions


def _ledgers_tagged(client: Any, tag: str) -> list[int]:
    return ledgers_with(client, "spark.writeTag", tag.encode())


def test_write_then_read_back_with_the_client(spark: Any, client: Any, metadata_uri: str) -> None:
    tag = uuid.uuid4().hex
    payloads = [b"row-%03d" % i for i in range(120)]
    df = spark.range(0, 120, numPartitions=3).selectExpr(
        "cast(format_string('row-%03d', id) as binary) as data"
    )
    (
        df.write.format("embedlog")
        .option("metadataUri", metadata_uri)
        .option("ensembleSize", "3")
        .option("writeQuorum", "2")
        .option("ackQuorum", "2")
        .option("writeTag", tag)
        .mode("append")
        .save()
    )
    ledgers = _ledgers_tagged(client, tag)
    assert len(ledgers) == 3  # one per (non-empty) partition
    seen: list[bytes] = []
    partitions = set()
    for lid in ledgers:
        md = client.ledger_metadata(lid)
        assert md.state is LedgerState.CLOSED
        assert (md.ensemble_size, md.write_quorum, md.ack_quorum) == (3, 2, 2)
        partitions.add(md.custom_metadata["spark.partitionId"])
        rh = client.open_ledger(lid)
        if md.last_entry_id >= 0:
            seen.extend(e.data for e in rh.read(0, md.last_entry_id))
    assert partitions == {b"0", b"1", b"2"}
    assert sorted(seen) == payloads

    # Spark reads back what Spark wrote, in each ledger's order.
    back = (
        spark.read.format("embedlog")
        .option("metadataUri", metadata_uri)
        .option("ledgers", ",".join(map(str, ledgers)))
        .load()
    )
    assert sorted(bytes(r.data) for r in back.collect()) == payloads


def test_write_keeps_partition_order_strings_password_and_digest(
    spark: Any, client: Any, metadata_uri: str
) -> None:
    tag = uuid.uuid4().hex
    texts = [f"línea {i}" for i in range(50)]
    df = spark.createDataFrame([(i, t) for i, t in enumerate(texts)], "n int, data string")
    (
        df.coalesce(1)
        .write.format("embedlog")
        .option("metadataUri", metadata_uri)
        .option("password", "pw")
        .option("digest", "MAC")
        .option("writeTag", tag)
        .mode("append")
        .save()
    )
    (lid,) = _ledgers_tagged(client, tag)
    md = client.ledger_metadata(lid)
    assert md.digest_type is DigestType.MAC
    entries = client.open_ledger(lid, password=b"pw").read(0, md.last_entry_id)
    assert [e.data.decode() for e in entries] == texts
    client.delete_ledger(lid)  # reading every ledger takes one password


def test_failed_task_deletes_its_partial_ledger(spark: Any, client: Any, metadata_uri: str) -> None:
    tag = uuid.uuid4().hex
    rows = [(b"ok-%d" % i,) for i in range(30)] + [(None,)]
    df = spark.createDataFrame(rows, "data binary").coalesce(1)
    with pytest.raises(Exception, match="null"):
        (
            df.write.format("embedlog")
            .option("metadataUri", metadata_uri)
            .option("writeTag", tag)
            .mode("append")
            .save()
        )
    assert _ledgers_tagged(client, tag) == []


def _writer(metadata_uri: str) -> EmbedlogWriter:
    from pyspark.sql.types import BinaryType, StructField, StructType

    opts = WriteOptions.parse({"metadataUri": metadata_uri, "writeQuorum": "2"})
    return EmbedlogWriter(opts, StructType([StructField("data", BinaryType())]))


def test_abort_deletes_every_ledger_of_the_write(client: Any, metadata_uri: str) -> None:
    # The driver's abort(), given the commit messages of the tasks that did finish; a
    # ledger of an attempt that never reported (its message is None) goes too.
    writer = _writer(metadata_uri)
    msg = writer.write(iter([(b"a",), (b"b",)]))
    lost = writer.write(iter([(b"c",)]))
    empty = writer.write(iter([]))
    assert isinstance(msg, EmbedlogCommitMessage) and msg.entries == 2
    assert empty.ledger_id == -1
    assert client.ledger_metadata(msg.ledger_id).state is LedgerState.CLOSED
    writer.abort([msg, empty, None])
    for lid in (msg.ledger_id, lost.ledger_id):
        with pytest.raises(NoSuchLedgerError):
            client.ledger_metadata(lid)


def test_commit_deletes_ledgers_of_discarded_attempts(client: Any, metadata_uri: str) -> None:
    # Two attempts of one partition both finished (speculation); Spark commits one.
    writer = _writer(metadata_uri)
    other = _writer(metadata_uri)  # another save(): not this write's business
    kept = writer.write(iter([(b"x",)]))
    discarded = writer.write(iter([(b"x",)]))
    unrelated = other.write(iter([(b"y",)]))
    writer.commit([kept])
    assert client.ledger_metadata(kept.ledger_id).last_entry_id == 0
    with pytest.raises(NoSuchLedgerError):
        client.ledger_metadata(discarded.ledger_id)
    assert client.ledger_metadata(unrelated.ledger_id).last_entry_id == 0


def test_write_option_errors(spark: Any, metadata_uri: str) -> None:
    df = spark.createDataFrame([(b"x",)], "data binary")
    w = df.write.format("embedlog").option("metadataUri", metadata_uri)
    with pytest.raises(Exception, match="append"):
        w.mode("overwrite").save()
    with pytest.raises(Exception, match="ensembleSize >= writeQuorum"):
        w.option("ensembleSize", "2").option("writeQuorum", "3").mode("append").save()
    with pytest.raises(Exception, match="'data' column"):
        spark.createDataFrame([(1,)], "x int").write.format("embedlog").option(
            "metadataUri", metadata_uri
        ).mode("append").save()
