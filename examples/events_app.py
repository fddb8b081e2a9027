"""An application appending events to a stream: ``python examples/events_app.py URI N``.

Each event is ``<user>,<seq>`` (UTF-8); the stream "events" is created on first use.
"""

from __future__ import annotations

import sys

import embedlog
from embedlog.errors import NoSuchLedgerInMetadataError

USERS = ("ada", "bob", "cy")


def append_events(uri: str, count: int, start: int = 0) -> None:
    client = embedlog.connect(uri, name="events-app")
    try:
        try:
            stream = client.open_unbounded("events")  # take the stream over as its writer
        except NoSuchLedgerInMetadataError:
            stream = client.create_unbounded(3, 3, 2, name="events")
        futures = [
            stream.append_async(f"{USERS[i % len(USERS)]},{i}".encode())
            for i in range(start, start + count)
        ]
        for f in futures:
            f.result()  # acknowledged: durable
        stream.close()
    finally:
        client.close()


if __name__ == "__main__":
    append_events(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 0)
