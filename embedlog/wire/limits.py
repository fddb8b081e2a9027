"""Size limits of entries and requests (docs/security.md, "Client limits").

A request travels in one frame, and a peer refuses frames above
``embedlog.transport.tcp.MAX_FRAME`` (64 MiB) by dropping the connection, which
fails every other request on it too. Clients therefore never build a request
near that size: an entry's payload is at most ``MAX_ENTRY_SIZE`` (a client may
lower its own limit, ``max_entry_size``, and does by default), and the writer
caps an ADD_BATCH by bytes (``MAX_BATCH_BYTES``).
"""

from __future__ import annotations

MIB = 1024 * 1024

# The largest payload any client may be configured to accept: half a frame, so that an
# entry sent alone (a plain ADD) always fits in one with every header and key around it.
MAX_ENTRY_SIZE = 32 * MIB

# A client's limit unless it sets ``max_entry_size``: BookKeeper's default frame size
# (nettyMaxFrameSizeBytes). An entry is digested, copied and journaled in one piece on
# the loop every ledger of the process shares: a 1 GiB one once stalled it for 70 s.
DEFAULT_MAX_ENTRY_SIZE = 5 * MIB

# The largest entry a bookie stores, as it arrives: the payload plus its header, digest
# and term, which take far less than this margin. Larger entries are refused (EBADREQ).
MAX_PACKED_ENTRY = MAX_ENTRY_SIZE + 4096


def oversized(entries: dict[int, bytes]) -> bool:
    """Whether any of a request's entries (id -> entry as stored) exceeds MAX_PACKED_ENTRY."""
    return any(len(entry) > MAX_PACKED_ENTRY for entry in entries.values())


# The entries' bytes one ADD_BATCH request holds at most (it holds at most
# embedlog.ledger.sending.MAX_BATCH entries too). Far below the frame limit: 64 entries of
# 1.1 MiB once made a 72 MB frame, the bookie dropped the connection, and every request
# on it failed. Small entries still fill a batch (64 of 64 KiB fit); an entry larger than
# the cap travels alone, as a plain ADD.
MAX_BATCH_BYTES = 4 * MIB


def split_batches(sizes: list[int], max_entries: int, max_bytes: int) -> list[tuple[int, int]]:
    """Consecutive runs [start, stop) of entries with these sizes, in order, each of at
    most ``max_entries`` entries and ``max_bytes`` bytes, except that an entry larger
    than ``max_bytes`` makes a run of its own."""
    runs: list[tuple[int, int]] = []
    start, total = 0, 0
    for i, size in enumerate(sizes):
        if i > start and (i - start == max_entries or total + size > max_bytes):
            runs.append((start, i))
            start, total = i, 0
        total += size
    if start < len(sizes):
        runs.append((start, len(sizes)))
    return runs


# What one READ_BATCH answer holds at most, whatever the request asks: bookies enforce
# both (``read_batch_bounds``). The entry count bounds the work one request does on the
# bookie's loop between other requests (each entry is a cache or index lookup and,
# once flushed, a read of the entry log); the bytes keep the answer far below the frame
# limit, as MAX_BATCH_BYTES does for ADD_BATCH.
MAX_READ_BATCH_ENTRIES = 512
MAX_READ_BATCH_BYTES = 4 * MIB


def read_batch_bounds(count: int, max_bytes: int) -> tuple[int, int]:
    """The entries and bytes a bookie puts in a READ_BATCH answer at most, for a request
    that asks for ``count`` entries and at most ``max_bytes`` bytes."""
    return min(count, MAX_READ_BATCH_ENTRIES), min(max_bytes, MAX_READ_BATCH_BYTES)


def read_batch_fits(taken: int, total: int, size: int, max_bytes: int) -> bool:
    """Whether an answer holding ``taken`` entries of ``total`` bytes takes one more of
    ``size`` bytes. The first always goes in, however large: an entry larger than the
    bound is still readable by batch (it is at most MAX_PACKED_ENTRY, within a frame)."""
    return taken == 0 or total + size <= max_bytes
