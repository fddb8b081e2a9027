"""An application appending events to a stream: ``python examples/events_app.py URI N [FIRST]``.

Each event is ``<user>,<seq>,<time>`` (UTF-8): ``time`` is when it happened, in epoch
seconds. This example's users click once a second, so event ``seq`` happened at
``START + seq`` and the windows of examples/aggregate_job.py come out the same on every
run. The stream "events" is created on first use.
"""

from __future__ import annotations

import sys

import embedlog
from embedlog.errors import NoSuchLedgerInMetadataError

USERS = ("ada", "bob", "cy")
START = 1_767_225_600  # 2026-01-01T00:00:00Z


def event(seq: int) -> tuple[str, int, int]:
    """(user, seq, time) of event ``seq``."""
    return USERS[seq % len(USERS)], seq, START + seq


def append_events(uri: str, count: int, first: int = 0, stream: str = "events") -> None:
    """Append events ``first`` .. ``first + count - 1``; returns once all are acknowledged."""
    client = embedlog.connect(uri, name="events-app")
    try:
        try:
            ul = client.open_unbounded(stream)  # take the stream over as its writer
        except NoSuchLedgerInMetadataError:
            ul = client.create_unbounded(3, 3, 2, name=stream)
        futures = [
            ul.append_async(",".join(str(v) for v in event(seq)).encode())
            for seq in range(first, first + count)
        ]
        for f in futures:
            f.result()  # acknowledged: durable
        ul.close()
    finally:
        client.close()


if __name__ == "__main__":
    append_events(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 0)
