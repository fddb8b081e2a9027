"""Put on PYTHONPATH of a Spark driver the tests kill: Python imports it at start-up in
every interpreter of the job (the driver's, Spark's worker daemon and the workers it
forks), and it stops the first commit into each stream named by EMBEDLOG_CRASH_AT (JSON:
stream ledger id -> point) at that point, writes the file EMBEDLOG_CRASH_MARKERS/<id>,
and waits there for the SIGKILL. One driver so holds several commits, each stopped at its
own point, and one kill (a machine failure) ends them all.

- ``record``: the tasks wrote their temporary ledgers and the stream is pinned, the sink
  record is not stored;
- ``before``: the sink record is stored and the stream pinned, no row is appended yet;
- ``mid``: ``EMBEDLOG_CRASH_ROWS`` rows are appended and acknowledged, the rest not;
- ``after``: every row is acknowledged, the record does not say done yet;
- ``unpin``: the record says done, the pin is not deleted yet.

Rows are appended one every 5 ms so that a consumer tailing the stream keeps up with
them and its cursor lets retention trim what it has read, as it would in production.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

_AT: dict[int, str] = {
    int(stream): point
    for stream, point in json.loads(os.environ.get("EMBEDLOG_CRASH_AT") or "{}").items()
}
_MARKERS = Path(os.environ.get("EMBEDLOG_CRASH_MARKERS", "."))
_ROWS = int(os.environ.get("EMBEDLOG_CRASH_ROWS", "0"))
_fired: set[int] = set()  # the streams whose commit this process stopped
_lock = threading.Lock()


def _fires(stream: int, point: str) -> bool:
    """Whether the commit into ``stream`` stops here (once per stream)."""
    with _lock:
        if _AT.get(stream) != point or stream in _fired:
            return False
        _fired.add(stream)
        return True


def _stop_here(stream: int, what: str) -> None:
    # Written whole under another name, then renamed: the test never reads half a marker.
    part = _MARKERS / f"{stream}.part"
    part.write_text(what)
    part.rename(_MARKERS / str(stream))
    threading.Event().wait()  # until the SIGKILL


def _install() -> None:
    from spark_connector import pins, stream_commit

    commit = stream_commit.StreamCommit
    store: Callable[..., int] = stream_commit._store
    unpin: Callable[..., None] = pins.unpin

    def stopping_store(client: Any, stream_id: int, *args: Any) -> int:
        if _fires(stream_id, "record"):
            _stop_here(stream_id, "before the record")
        return store(client, stream_id, *args)

    def stopping_unpin(ul: Any, *args: Any) -> None:
        if _fires(ul.ledger_id, "unpin"):
            _stop_here(ul.ledger_id, "before the pin is deleted")
        unpin(ul, *args)

    append: Callable[..., None] = commit.append
    rows: Callable[..., Iterable[Any]] = commit.rows

    def paced_rows(self: Any, temps: Iterable[int], skip: int) -> Iterator[Any]:
        for n, data in enumerate(rows(self, temps, skip)):
            if n == _ROWS and _fires(self.stream_id, "mid"):
                time.sleep(1.0)  # the rows in flight are acknowledged, rollovers done
                _stop_here(self.stream_id, f"mid after {n} rows")
            time.sleep(0.005)
            yield data

    def stopping_append(self: Any, ul: Any, record: Any) -> None:
        if _fires(self.stream_id, "before"):
            _stop_here(self.stream_id, "before the first append")
        append(self, ul, record)
        if _fires(self.stream_id, "after"):
            _stop_here(self.stream_id, "after the last append")

    stream_commit._store = stopping_store
    pins.unpin = stopping_unpin
    commit.rows = paced_rows  # type: ignore[method-assign]
    commit.append = stopping_append  # type: ignore[method-assign]


if _AT:
    _install()
