"""Retention is applied in the background, by the writer, at rollovers and as a quiet
stream ages: a metadata error on the way (ZooKeeper unreachable) skips that round,
with a warning, and the next one applies it. The writer and its age ticks go on."""

from __future__ import annotations

import logging
import threading
import time

from unbounded_helpers import DelegatingStore

from embedlog import Retention
from embedlog.errors import MetadataUnavailableError
from embedlog.metadata import streams
from embedlog.metadata.store import MetadataStore


class CursorReadsFail(DelegatingStore):
    """A store whose listing of one stream's cursors (what every trim decides from)
    fails while ``failing`` is set, as a ZooKeeper outage makes it fail."""

    def __init__(self, inner: MetadataStore, path: str) -> None:
        super().__init__(inner)
        self.path = path
        self.failing = threading.Event()
        self.failures = 0

    def children(self, path: str) -> list[str]:
        if path == self.path and self.failing.is_set():
            self.failures += 1
            raise MetadataUnavailableError("the metadata store is unreachable (injected)")
        return self.inner.children(path)


def wait_until(condition, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_a_quiet_stream_keeps_ageing_out_after_its_retention_hit_metadata_errors(cluster, caplog):
    w = cluster.client("writer")
    # Entries go 0.4 s after their fragment is sealed; the writer looks every 0.1 s.
    ul = w.create_unbounded(3, 3, 2, retention=Retention(max_age=0.4))
    store = CursorReadsFail(cluster.metadata.store, f"{streams.CURSORS}/{ul.ledger_id:020d}")
    cluster.metadata.store = store
    store.failing.set()
    for i in range(10):
        ul.append(b"%d" % i)
    with caplog.at_level(logging.WARNING, logger="embedlog.unbounded.writer"):
        # Several rounds fail: the age ticks outlive the first failure.
        wait_until(lambda: store.failures >= 3, "the age ticks stopped at the first failure")
        assert min(w.ledger_metadata(ul.ledger_id).ensembles) == 0  # nothing trimmed yet
        store.failing.clear()
        wait_until(
            lambda: min(w.ledger_metadata(ul.ledger_id).ensembles) >= 10,
            "retention never applied once the store answered again",
        )
    assert any(
        "retention" in r.getMessage() and "unreachable" in r.getMessage() for r in caplog.records
    )
    assert ul.append(b"after") == 10  # the writer was never failed by it
    assert [e.data for e in ul.read(10, 10)] == [b"after"]
