"""Run by tests/bookie/test_flush_retry.py in a process of its own (it lowers the
process's open-file limit): exhausts the file descriptors with idle TCP connections to
the bookies, as the review did (~20,000 there), so that their flushes fail; then lets
the connections go. Waits (no deadline) until every bookie is writable again and prints
one JSON line of what it saw. Arguments: a data directory, bookie settings as JSON."""

import json
import os
import resource
import socket
import sys
import time

from embedlog import LocalCluster
from embedlog.transport.tcp import parse_address


def main(data_dir: str) -> None:
    with LocalCluster(
        3,
        data_dir=data_dir,
        transport="tcp",
        flush_interval=0.05,
        entry_log_max_size=1024,  # every flush opens a new entry log file
        **json.loads(sys.argv[2]),
    ) as cluster:
        ids = cluster.bookie_ids
        client = cluster.client("w")
        wh = client.create_ledger(3, 3, 2)
        wh.add(b"before")
        storages = [cluster.bookie(b).storage for b in ids]
        while any(cluster.runtime.call(lambda s=s: bool(s.cache)) for s in storages):
            time.sleep(0.01)  # flushed: what follows is what meets the exhausted descriptors
        # The flushes wait until the entries are added: no bookie may turn read-only (and
        # refuse them) first. Then they need new entry log files, and fail.
        locks = [s.exclusive() for s in storages]
        for lock in locks:
            cluster.runtime.run(lock.acquire())
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 300, hard))
        addresses = [parse_address(cluster.transport.address(b)) for b in ids]
        idle = []
        try:
            while True:  # idle connections until no descriptor is left
                idle.append(socket.create_connection(addresses[len(idle) % len(ids)]))
        except OSError:
            pass
        payloads = [b"acked %d " % i * 100 for i in range(20)]
        for p in payloads:  # journaled and acknowledged: no new descriptor needed
            wh.add(p)
        for lock in locks:
            cluster.runtime.call(lock.release)

        def readonly() -> list[str]:
            return [b for b in ids if cluster.runtime.call(lambda b=b: cluster.bookie(b).readonly)]

        while len(readonly()) < len(ids):
            time.sleep(0.01)
        for s in idle:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        while readonly() or sorted(cluster.metadata.writable_bookies()) != sorted(ids):
            time.sleep(0.01)
        held = {
            b: [cluster.read_from_bookie(b, wh.ledger_id, e) for e in range(1, 21)] for b in ids
        }
        after = client.create_ledger(3, 3, 3)
        after.add(b"after")
        print(
            json.dumps(
                {
                    "idle_connections": len(idle),
                    "every_bookie_holds_every_entry": all(h == payloads for h in held.values()),
                    "written_after": [e.data.decode() for e in after.read(0, 0)],
                }
            )
        )


main(sys.argv[1])
