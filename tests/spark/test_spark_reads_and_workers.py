"""Stream reads by name, endingOffsets and failOnDataLoss; the check of the workers' Python."""

from __future__ import annotations

import sys
import uuid
from typing import Any

import pytest

from spark_connector import DataLossError, EmbedlogBatchReader, LedgerRange, WorkerPythonError
from spark_connector.options import OptionError, ReadOptions
from spark_connector.workers import check_workers, probe


def _trimmed_stream(client: Any) -> tuple[Any, str]:
    name = f"r-{uuid.uuid4().hex[:8]}"
    ul = client.create_unbounded(3, 3, 2, name=name, fragment_max_entries=10)
    for i in range(30):
        ul.append(b"e%d" % i)
    ul.trim(20)
    return ul, name


def _rows(reader: EmbedlogBatchReader) -> list[tuple[int, bytes]]:
    return [(row[1], row[2]) for part in reader.partitions() for row in reader.read(part)]


def test_batch_read_of_a_stream_by_name_with_offsets_and_data_loss(
    client: Any, metadata_uri: str
) -> None:
    ul, name = _trimmed_stream(client)
    base = {"metadataUri": metadata_uri, "stream": name}
    # Default: from the trim point to the last confirmed entry.
    assert _rows(EmbedlogBatchReader(ReadOptions.parse(base))) == [
        (i, b"e%d" % i) for i in range(20, 30)
    ]
    ending = {**base, "endingOffsets": f'{{"{name}": 25}}'}
    assert [e for e, _ in _rows(EmbedlogBatchReader(ReadOptions.parse(ending)))] == list(
        range(20, 25)
    )
    # Asking for trimmed entries fails the read (Kafka's failOnDataLoss=true) ...
    lost = {**base, "startingOffsets": f'{{"{ul.ledger_id}": 5}}'}
    with pytest.raises(DataLossError, match=r"entries 5\.\.19 were trimmed"):
        _rows(EmbedlogBatchReader(ReadOptions.parse(lost)))
    # ... or skips them when told to.
    skip = EmbedlogBatchReader(ReadOptions.parse({**lost, "failOnDataLoss": "false"}))
    assert [e for e, _ in _rows(skip)] == list(range(20, 30))
    # A range planned before a trim: the task finds its entries gone.
    task = EmbedlogBatchReader(ReadOptions.parse(base))
    with pytest.raises(DataLossError):
        list(task.read(LedgerRange(ul.ledger_id, 0, 25)))
    with pytest.raises(OptionError, match="confirmed entry is 29"):
        EmbedlogBatchReader(
            ReadOptions.parse({**base, "endingOffsets": f'{{"{name}": 40}}'})
        ).partitions()
    ul.close()


def test_register_refuses_workers_that_cannot_import_this_connector(spark: Any) -> None:
    ours = probe(sys.executable, None)
    assert isinstance(ours, list) and ours[1].endswith("spark_connector/__init__.py")
    assert check_workers(spark)[0].executable == sys.executable
    sc = spark.sparkContext
    saved = sc.pythonExec
    # An interpreter without the project's dependencies (the system one, here).
    sc.pythonExec = "/usr/bin/python3"
    try:
        with pytest.raises(
            WorkerPythonError,
            match=r"cannot import the embedlog connector.*No module named .*PYSPARK_PYTHON",
        ):
            check_workers(spark)
    finally:
        sc.pythonExec = saved
