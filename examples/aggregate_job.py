"""A Spark structured-streaming job: reads the stream "events" and appends to the stream
"counts" one ``<user>,<seq>,<length>`` row per event, the user upper-cased. (Python data
sources accept only the append output mode, so Spark's stateful aggregations, which need
update mode or a watermark, are left to the readers of "counts".)

    python examples/aggregate_job.py URI CHECKPOINT_DIR

Runs with ``trigger(availableNow=True)``: reads what is there, then stops. Run it again
(after more events) and it resumes from its checkpoint; the sink appends every batch
once, also when Spark replays one after a crash.
"""

from __future__ import annotations

import sys

import embedlog
from embedlog.errors import NoSuchLedgerInMetadataError


def ensure_stream(uri: str, name: str) -> None:
    client = embedlog.connect(uri, name="aggregate-setup")
    try:
        try:
            client.runtime.run(client.stream_id_aio(name))
        except NoSuchLedgerInMetadataError:
            client.create_unbounded(3, 3, 2, name=name).close()
    finally:
        client.close()


def run(spark: object, uri: str, checkpoint: str) -> None:
    from spark_connector import register

    ensure_stream(uri, "counts")
    register(spark)
    events = (
        spark.readStream.format("embedlog")  # type: ignore[attr-defined]
        .option("metadataUri", uri)
        .option("stream", "events")
        .load()
    )
    rows = events.selectExpr("split(cast(data as string), ',') as f").selectExpr(
        "concat_ws(',', upper(f[0]), f[1], cast(length(f[0]) as string)) as data"
    )
    query = (
        rows.writeStream.format("embedlog")
        .outputMode("append")
        .option("metadataUri", uri)
        .option("stream", "counts")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


if __name__ == "__main__":
    import os

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = SparkSession.builder.master("local[2]").appName("aggregate").getOrCreate()
    try:
        run(session, sys.argv[1], sys.argv[2])
    finally:
        session.stop()
