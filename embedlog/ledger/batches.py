"""Reading a range as an iterator, in batches, one batch ahead.

``entries(first, last)`` on the handles: a large ledger is never held in memory whole,
and the next batch is already on the wire while the caller works through the current one.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

from embedlog.ledger.entries import Entry
from embedlog.runtime import Runtime

BATCH = 512  # entries one read of the iterator asks for

Read = Callable[[int, int], Coroutine[Any, Any, list[Entry]]]


def batched(runtime: Runtime, read: Read, first: int, last: int) -> Iterator[Entry]:
    """Entries first..last by ``read(a, b)`` calls of at most BATCH entries."""
    ahead: concurrent.futures.Future[list[Entry]] | None = None
    for start in range(first, last + 1, BATCH):
        future = runtime.submit(read(start, min(last, start + BATCH - 1)))
        if ahead is not None:
            yield from ahead.result()
        ahead = future
    if ahead is not None:
        yield from ahead.result()
