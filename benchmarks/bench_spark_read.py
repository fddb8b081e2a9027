"""Rows/s of a Spark batch read (local[2]) of one ledger against the Python client reading
the same ledger in one process, in the same run.

    python benchmarks/bench_spark_read.py [--entries 1000000] [--size 100]

Needs PySpark, Java and ZooKeeper (as tests/spark). Three TCP bookies run in this process,
so they share the machine's cores with Spark's workers, as in the tests.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100, help="bytes per entry")
    args = parser.parse_args()

    from embedlog import LocalCluster
    from embedlog.metadata.zkserver import running_zookeeper

    with running_zookeeper() as zk, tempfile.TemporaryDirectory() as tmp:
        uri = zk.uri("/bench-spark")
        with LocalCluster(3, data_dir=tmp, transport="tcp", metadata_uri=uri) as cluster:
            client = cluster.client("bench")
            t0 = time.perf_counter()
            wh = client.create_ledger(3, 3, 2)
            payload = b"x" * args.size
            pending: deque = deque()
            for _ in range(args.entries):
                pending.append(wh.add_async(payload))
                if len(pending) >= 2000:
                    pending.popleft().result()
            while pending:
                pending.popleft().result()
            wh.close()
            lid = wh.ledger_id
            print(f"wrote {args.entries} entries in {time.perf_counter() - t0:.1f} s")

            t0 = time.perf_counter()
            rh = client.open_ledger(lid)
            total = sum(len(e.data) for e in rh.entries(0, args.entries - 1))
            client_s = time.perf_counter() - t0
            assert total == args.entries * args.size
            client_rate = args.entries / client_s

            spark_rate, spark_s = spark_read(uri, lid, args.entries, args.size)
            print(
                f"python client, one process: {client_rate:,.0f} rows/s ({client_s:.1f} s)\n"
                f"spark local[2] batch read:  {spark_rate:,.0f} rows/s ({spark_s:.1f} s, "
                "session already started)\n"
                f"ratio spark/client: {spark_rate / client_rate:.2f}"
            )
            client.close()


def spark_read(uri: str, lid: int, entries: int, size: int) -> tuple[float, float]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    from pyspark.sql import SparkSession

    from spark_connector import register

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    try:
        df = spark.read.format("embedlog").option("metadataUri", uri).option("ledgers", str(lid))
        t0 = time.perf_counter()
        (row,) = df.load().selectExpr("count(*) as n", "sum(length(data)) as b").collect()
        elapsed = time.perf_counter() - t0
        assert (row.n, row.b) == (entries, entries * size), row
        return entries / elapsed, elapsed
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
