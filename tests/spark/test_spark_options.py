"""The connector's pieces driven directly, as Spark's workers drive them (no SparkSession)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType
from tls_certs import make_pki

from embedlog.errors import TlsHandshakeError
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


def test_tls_options_for_mutual_tls() -> None:
    uri = {"metadataUri": "zk://127.0.0.1:2181/x"}
    plain = ConnectionOptions.parse(uri)
    assert (plain.tls_ca, plain.tls_cert, plain.tls_key) == (None, None, None)
    conn = ConnectionOptions.parse(
        {**uri, "tlsCa": "/etc/ca.pem", "TLSCERT": "/etc/client.pem", "tlskey": "/etc/client.key"}
    )
    assert (conn.tls_ca, conn.tls_cert, conn.tls_key) == (
        "/etc/ca.pem",
        "/etc/client.pem",
        "/etc/client.key",
    )
    # Every reader and writer carries them to its tasks.
    assert ReadOptions.parse({**uri, "tlsCert": "c", "tlsKey": "k"}).conn.tls_cert == "c"
    assert WriteOptions.parse({**uri, "tlsCert": "c", "tlsKey": "k"}).conn.tls_key == "k"
    with pytest.raises(OptionError, match="option 'tlsCert' needs 'tlsKey'"):
        ConnectionOptions.parse({**uri, "tlsCert": "/etc/client.pem"})
    with pytest.raises(OptionError, match="option 'tlsKey' needs 'tlsCert'"):
        ConnectionOptions.parse({**uri, "tlsKey": "/etc/client.key"})


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
    assert (
        source.writer(StructType([StructField("DATA", BinaryType())]), False).rows.data_index == 0
    )


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
    # A bounded ledger's rows: no timestamp, no key, no headers.
    assert rows == [(wh.ledger_id, i, b"t%d" % i, None, None, {}) for i in range(7)]


def test_read_over_mutual_tls(make_cluster: Any, zk_uri: str, tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    cluster = make_cluster(
        3,
        transport="tcp",
        metadata_uri=zk_uri,
        tls_cert=pki.bookie.cert,
        tls_key=pki.bookie.key,
        tls_ca=pki.ca.cert,
        tls_require_client_cert=True,
    )
    wh = cluster.client("w").create_ledger(3, 2, 2)
    for i in range(3):
        wh.add(b"m%d" % i)
    wh.close()
    options = {"metadataUri": zk_uri, "tlsCa": str(pki.ca.cert), "ledgers": str(wh.ledger_id)}
    reader = EmbedlogBatchReader(
        ReadOptions.parse(
            {**options, "tlsCert": str(pki.client.cert), "tlsKey": str(pki.client.key)}
        )
    )
    (part,) = reader.partitions()
    assert [r[:3] for r in reader.read(part)] == [(wh.ledger_id, i, b"m%d" % i) for i in range(3)]
    # Without the client certificate the bookies refuse the task, saying why.
    no_cert = EmbedlogBatchReader(ReadOptions.parse(options))
    with pytest.raises(TlsHandshakeError, match="refuses this client's certificate"):
        list(no_cert.read(part))


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


def test_without_pyspark_importing_the_connector_names_the_install_command() -> None:
    script = textwrap.dedent(
        """
        import sys
        sys.modules["pyspark"] = None  # as if it were not installed
        for name in ("spark_connector", "spark_connector.options"):
            try:
                __import__(name)
            except ImportError as exc:
                print(type(exc).__name__, exc)
            else:
                print("imported", name)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    lines = out.stdout.splitlines()
    assert len(lines) == 2
    for line in lines:
        assert line.startswith("MissingExtraError the Spark connector (spark_connector) needs")
        assert line.endswith("pip install 'embedlog[spark]'")
