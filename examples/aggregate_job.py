"""A Spark structured-streaming job: counts the events of the stream "events" per user in
10-second windows of event time and appends each window's counts to the stream "counts",
once, as ``<window start, epoch seconds>,<user>,<count>`` rows.

    python examples/aggregate_job.py URI CHECKPOINT_DIR [--once]

The count of a window is final once the watermark (the latest event time seen, less 5
seconds allowed for late events) passes the window's end: Spark's append output mode
emits it then, and never again, so "counts" holds final counts only. Events later than
that are dropped. The windows still open wait for later events.

Without ``--once`` the job runs until stopped, a micro-batch every second; with it, it
reads what is in "events", emits what that closes, and stops. Either way it resumes from
its checkpoint: a job killed at any point and started again appends each count once.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any

import embedlog
from embedlog.errors import NoSuchLedgerInMetadataError

WINDOW = "10 seconds"
LATENESS = "5 seconds"  # how late an event may come and still be counted


def ensure_stream(uri: str, name: str) -> None:
    client = embedlog.connect(uri, name="aggregate-setup")
    try:
        try:
            client.stream_id(name)
        except NoSuchLedgerInMetadataError:
            client.create_unbounded(3, 3, 2, name=name).close()
    finally:
        client.close()


def window_counts(events: Any) -> Any:
    """The rows (a ``data`` string column) to append: one per window and user, final."""
    from pyspark.sql.functions import window

    parsed = events.selectExpr("split(cast(data as string), ',') as f").selectExpr(
        "f[0] as user", "timestamp_seconds(cast(f[2] as bigint)) as time"
    )
    counts = parsed.withWatermark("time", LATENESS).groupBy(window("time", WINDOW), "user").count()
    return counts.selectExpr(
        "concat_ws(',', cast(unix_seconds(window.start) as string), user, "
        "cast(count as string)) as data"
    )


def start(
    spark: Any,
    uri: str,
    checkpoint: str,
    *,
    once: bool,
    source: str = "events",
    target: str = "counts",
) -> Any:
    """Start the query (a ``StreamingQuery``); ``once``: stop when "events" is read."""
    from spark_connector import register

    ensure_stream(uri, target)
    register(spark)
    events = (
        spark.readStream.format("embedlog")
        .option("metadataUri", uri)
        .option("stream", source)
        .load()
    )
    writer = (
        window_counts(events)
        .writeStream.format("embedlog")
        .outputMode("append")
        .option("metadataUri", uri)
        .option("stream", target)
        .option("checkpointLocation", checkpoint)
    )
    writer = (
        writer.trigger(availableNow=True) if once else writer.trigger(processingTime="1 second")
    )
    return writer.start()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("uri", help="the cluster's metadata URI, zk://host:port/path")
    parser.add_argument("checkpoint", help="the query's checkpoint directory")
    parser.add_argument("--once", action="store_true", help="read what is there, then stop")
    args = parser.parse_args(argv)
    # Spark's Python workers must import this interpreter's spark_connector.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("aggregate")
        # The windows' state is kept per shuffle partition (fixed by the first run's
        # checkpoint): Spark's 200 are far too many for one machine's event counts.
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    # Ctrl-C or SIGTERM stops the query between Spark calls: PySpark's own SIGINT handler
    # would call into the JVM while the main thread waits on it.
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        query = start(spark, args.uri, args.checkpoint, once=args.once)
        print(f"query {query.id} started", flush=True)
        while not stop.is_set() and not query.awaitTermination(1):
            pass
        query.stop()
        if query.exception() is not None:
            raise SystemExit(f"the query failed: {query.exception()}")
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
