"""A Spark driver the tests kill: streaming queries that copy one stream into another.

    python tests/spark/sink_crash_driver.py URI

Each line ``SOURCE TARGET CHECKPOINT`` it reads on stdin starts a query that reads what
SOURCE holds (``trigger(availableNow=True)``, two partitions of at most 100 entries each)
and appends it to TARGET through the connector's sink; it says ``started TARGET`` on
stdout. Started with ``crash_hooks`` on PYTHONPATH, the first commit into each target
stops at a point and waits to be killed: one driver so holds several stopped commits.
"""

from __future__ import annotations

import sys


def main() -> None:
    from pyspark.sql import SparkSession

    from spark_connector import register

    (uri,) = sys.argv[1:]
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("embedlog-sink-crash")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    queries = []
    while line := sys.stdin.readline():
        source, target, checkpoint = line.split()
        queries.append(start(spark, uri, source, target, checkpoint))
        print("started", target, flush=True)
    for query in queries:
        query.awaitTermination()  # type: ignore[attr-defined]


def start(spark: object, uri: str, source: str, target: str, checkpoint: str) -> object:
    """The query (the tests' own session restarts it from the checkpoint with this)."""
    rows = (
        spark.readStream.format("embedlog")  # type: ignore[attr-defined]
        .option("metadataUri", uri)
        .option("stream", source)
        .option("entriesPerPartition", "100")
        .load()
        .select("data")
    )
    return (
        rows.writeStream.format("embedlog")
        .option("metadataUri", uri)
        .option("stream", target)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )


if __name__ == "__main__":
    main()
