"""A Spark driver the tests kill: a streaming query that copies one stream into another.

    python tests/spark/sink_crash_driver.py URI SOURCE TARGET CHECKPOINT

It reads what SOURCE holds (``trigger(availableNow=True)``, two partitions of at most
100 entries each) and appends it to TARGET through the connector's sink. Started with
``crash_hooks`` on PYTHONPATH, its first commit stops at a point and waits to be killed.
"""

from __future__ import annotations

import sys


def main() -> None:
    from pyspark.sql import SparkSession

    from spark_connector import register

    uri, source, target, checkpoint = sys.argv[1:]
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("embedlog-sink-crash")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    query = start(spark, uri, source, target, checkpoint)
    print("started", flush=True)
    query.awaitTermination()


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
