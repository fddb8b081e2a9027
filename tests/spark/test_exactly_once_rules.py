"""The sink record's decisions, table tested (no cluster, no Spark)."""

from __future__ import annotations

import pytest

from spark_connector.exactly_once import (
    NO_BATCH,
    SinkRecord,
    count_landed,
    decide,
    landed,
    protected,
    resumed,
    sink_name,
)
from spark_connector.options import OptionError, close_match, unknown_options
from spark_connector.pins import pin_name, pins, stale
from spark_connector.reading import DataLossError, checked_start
from spark_connector.workers import WorkerPython, explain, worker_pythons


def rec(**kw: object) -> SinkRecord:
    base = dict(batch=4, write_id="w", temps=(7, 8), total=10, skip=0, first=20, term=3, done=False)
    base.update(kw)
    return SinkRecord(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("record", "batch", "expected"),
    [
        (None, 0, "append"),
        (rec(batch=4, done=True), 5, "append"),
        (rec(batch=4, done=True), 4, "skip"),  # Spark replays the last batch
        (rec(batch=4, done=True), 2, "skip"),
        (rec(batch=4, done=True), NO_BATCH, "append"),  # a batch write is never a replay
    ],
)
def test_decide(record: SinkRecord | None, batch: int, expected: str) -> None:
    assert decide(record, batch) == expected


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        ([], 0),
        ([(20, 3), (21, 3), (22, 3)], 3),
        ([(20, 3), (21, 3), (22, 4)], 2),  # a later term's no-op or entry follows the prefix
        ([(20, 4), (21, 4)], 0),  # another writer's entries at the record's ids
        ([(20, 3), (22, 3)], 1),  # ids must be consecutive
        ([(20 + i, 3) for i in range(15)], 10),  # never more than the record's rows
    ],
)
def test_landed(entries: list[tuple[int, int]], expected: int) -> None:
    assert landed(rec(), entries) == expected


# rec(): rows 20.. of term 3, 10 of them; the asker is term 5 (or 4) from its no-op at 26.
@pytest.mark.parametrize(
    ("kept_from", "entries", "taker_term", "expected"),
    [
        # The pin kept everything from the record's first: the entries tell.
        (0, [(20, 3), (21, 3), (22, 3)], 5, 3),
        (20, [(20, 3), (21, 3)], 5, 2),
        (20, [], 5, 0),
        # Trimmed above first, an entry of the record's term at the trim point: all ids
        # below it were that term's, then count on.
        (24, [(24, 3), (25, 3)], 5, 6),
        (24, [(24, 3), (25, 3), (27, 5)], 5, 6),
        (24, [(24, 3)] + [(25 + i, 3) for i in range(10)], 5, 10),  # never above its rows
        # Trimmed above first, nothing of the record's term left: only if no term came
        # between the record's and the asker's, its term ended right below the no-op.
        (26, [(27, 4)], 4, 6),
        (26, [], 4, 6),
        (40, [(40, 4)], 4, 6),
        (26, [(27, 5)], 5, None),  # term 4 came between: cannot tell
        (24, [(24, 4)], 5, None),
    ],
)
def test_count_landed(
    kept_from: int, entries: list[tuple[int, int]], taker_term: int, expected: int | None
) -> None:
    assert count_landed(rec(), kept_from, entries, taker_term, 26) == expected


def test_count_landed_after_a_resume_counts_the_rows_left() -> None:
    # 7 of 10 rows were found before; 3 remain, appended from 20 in term 3.
    assert count_landed(rec(skip=7), 25, [(25, 3)], 4, 30) == 3
    assert count_landed(rec(skip=7), 0, [(20, 3), (21, 3)], 4, 30) == 2


def test_stale_pins_are_those_whose_record_is_done_or_gone() -> None:
    cursors = {"reader": 4, pin_name("query-a"): 9, pin_name("query-b"): 19, pin_name("w"): 3}
    assert pins(cursors) == {"query-a": 9, "query-b": 19, "w": 3}
    records = {"query-a": rec(done=True), "query-b": rec(), "query-c": rec(done=True)}
    assert stale(pins(cursors), records) == ["query-a", "w"]


def test_resumed_counts_what_landed_and_moves_to_the_new_term() -> None:
    r = resumed(rec(skip=2), 3, 40, 5)
    assert (r.skip, r.first, r.term, r.done) == (5, 40, 5, False)
    assert resumed(rec(skip=2), 8, 40, 5).done
    assert SinkRecord.from_bytes(r.to_bytes()) == r


def test_protected_are_the_temporaries_of_unfinished_records() -> None:
    assert protected([rec(temps=(1, 2)), rec(temps=(3,), done=True)]) == {1, 2}


def test_sink_name() -> None:
    assert sink_name("q1", "w") == "query-q1"
    assert sink_name(None, "w") == "write-w"


def test_unknown_options_in_every_direction() -> None:
    for direction in ("read", "readStream", "write", "writeStream"):
        # Spark's own: path / paths (load, save, start), checkpointLocation, queryName.
        spark_own = {"PATH": "p", "paths": "[]", "checkpointlocation": "c", "queryname": "q1"}
        given = {"metadataUri": "x", "ledgr": "1", **spark_own}
        assert unknown_options(given, direction) == ["ledgr"]
    assert unknown_options({"maxEntriesPerTrigger": "5"}, "read") == ["maxEntriesPerTrigger"]
    assert unknown_options({"endingOffsets": "latest"}, "readStream") == ["endingOffsets"]
    assert unknown_options({"ensembleSize": "3"}, "read") == ["ensembleSize"]
    assert unknown_options({"recover": "true"}, "write") == ["recover"]


@pytest.mark.parametrize(
    ("first", "stored_from", "fail", "expected"),
    [(5, 3, True, 5), (3, 3, True, 3), (1, 3, False, 3), (1, 3, True, DataLossError)],
)
def test_checked_start(first: int, stored_from: int, fail: bool, expected: object) -> None:
    if expected is DataLossError:
        with pytest.raises(DataLossError, match="failOnDataLoss=false"):
            checked_start(9, first, stored_from, fail)
    else:
        assert checked_start(9, first, stored_from, fail) == expected


def test_worker_pythons_follow_spark_s_order() -> None:
    assert worker_pythons("python3", {}, None) == [
        WorkerPython(
            "python3", "python3 on the PATH: PYSPARK_PYTHON was not set when the session started"
        )
    ]
    env = {"PYSPARK_PYTHON": "/venv/bin/python"}
    assert [w.setting for w in worker_pythons("/venv/bin/python", env, "/opt/py")] == [
        "PYSPARK_PYTHON",
        "spark.pyspark.python",
    ]
    choice = WorkerPython("python3", "PYSPARK_PYTHON")
    assert explain(choice, ["/a/embedlog", "/a/sc"], ["/a/embedlog", "/a/sc"]) is None
    other = explain(choice, ["/b/embedlog", "/b/sc"], ["/a/embedlog", "/a/sc"])
    assert other is not None and "another copy" in other and "PYSPARK_PYTHON" in other
    missing = explain(choice, "ModuleNotFoundError: No module named 'spark_connector'", ["a", "b"])
    assert missing is not None and "spark.pyspark.python" in missing


def test_option_error_lists_the_known_options() -> None:
    from spark_connector.options import WriteOptions

    with pytest.raises(
        OptionError,
        match=r"unknown option.*'ledgr' for writeStream \('ledgr': did you mean 'ledger'\?\); "
        r"writeStream knows: metadataUri.*\(and Spark's own: path, paths, checkpointLocation",
    ):
        WriteOptions.parse({"metadataUri": "zk://h:1/x", "ledgr": "1"}, "writeStream")


@pytest.mark.parametrize(
    ("name", "direction", "expected"),
    [
        ("ledgr", "write", "ledger"),
        ("ensemblesise", "write", "ensembleSize"),
        ("maxoutstandng", "writeStream", "maxOutstanding"),
        ("checkpointlocaton", "writeStream", "checkpointLocation"),
        ("querynme", "writeStream", "queryName"),
        ("startingoffset", "readStream", "startingOffsets"),
        ("zzz", "write", None),
        ("maxentriespertrigger", "read", None),  # a readStream option is no typo for read
    ],
)
def test_close_match(name: str, direction: str, expected: str | None) -> None:
    assert close_match(name, direction) == expected
