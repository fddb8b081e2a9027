"""Put on PYTHONPATH of a Spark driver the tests kill: Python imports it at start-up in
every interpreter of the job (the driver's, Spark's worker daemon and the workers it
forks), and it stops the first commit into a stream at the point named by
EMBEDLOG_CRASH_AT, writes EMBEDLOG_CRASH_MARKER, and waits there for the SIGKILL.

- ``record``: the tasks wrote their temporary ledgers, the sink record is not stored;
- ``before``: the sink record is stored and the stream pinned, no row is appended yet;
- ``mid``: ``EMBEDLOG_CRASH_ROWS`` rows are appended and acknowledged, the rest not;
- ``after``: every row is acknowledged, the record does not say done yet;
- ``unpin``: the record says done, the pin is not deleted yet.

Rows are appended one every 5 ms so that a consumer tailing the stream keeps up with
them and its cursor lets retention trim what it has read, as it would in production.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

_AT = os.environ.get("EMBEDLOG_CRASH_AT")
_MARKER = os.environ.get("EMBEDLOG_CRASH_MARKER", "")
_ROWS = int(os.environ.get("EMBEDLOG_CRASH_ROWS", "0"))
_fired = threading.Event()


def _stop_here(what: str) -> None:
    with open(_MARKER, "w") as out:
        out.write(what)
    threading.Event().wait()  # until the SIGKILL


def _install() -> None:
    from spark_connector import pins, stream_commit

    commit = stream_commit.StreamCommit
    store: Callable[..., int] = stream_commit._store
    unpin: Callable[..., None] = pins.unpin

    def stopping_store(*args: Any) -> int:
        if _AT == "record" and not _fired.is_set():
            _fired.set()
            _stop_here("before the record")
        return store(*args)

    def stopping_unpin(*args: Any) -> None:
        if _AT == "unpin" and not _fired.is_set():
            _fired.set()
            _stop_here("before the pin is deleted")
        unpin(*args)

    append: Callable[..., None] = commit.append
    rows: Callable[..., Iterable[Any]] = commit.rows

    def paced_rows(self: Any, temps: Iterable[int], skip: int) -> Iterator[Any]:
        for n, data in enumerate(rows(self, temps, skip)):
            if _AT == "mid" and n == _ROWS and not _fired.is_set():
                _fired.set()
                time.sleep(1.0)  # the rows in flight are acknowledged, rollovers done
                _stop_here(f"mid after {n} rows")
            time.sleep(0.005)
            yield data

    def stopping_append(self: Any, ul: Any, record: Any) -> None:
        first = not _fired.is_set()
        if first and _AT == "before":
            _fired.set()
            _stop_here("before the first append")
        append(self, ul, record)
        if first and _AT == "after":
            _fired.set()
            _stop_here("after the last append")

    stream_commit._store = stopping_store
    pins.unpin = stopping_unpin
    commit.rows = paced_rows  # type: ignore[method-assign]
    commit.append = stopping_append  # type: ignore[method-assign]


if _AT:
    _install()
