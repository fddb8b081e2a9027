"""What readers get back."""

from __future__ import annotations

from collections.abc import Mapping

from attrs import frozen

from embedlog.wire.record import NO_HEADERS


@frozen
class Entry:
    """One entry as readers see it. Stream records (embedlog/wire/record.py) also carry
    the writer's ``timestamp`` (seconds since the epoch), a ``key``, ``headers`` and the
    producer's ``msg_id``; bounded ledgers' entries and stream entries written before
    records existed have ``timestamp``, ``key`` and ``msg_id`` None and no headers."""

    ledger_id: int
    entry_id: int
    data: bytes
    timestamp: float | None = None
    key: bytes | None = None
    headers: Mapping[str, bytes] = NO_HEADERS
    msg_id: bytes | None = None

    def __len__(self) -> int:
        return len(self.data)
