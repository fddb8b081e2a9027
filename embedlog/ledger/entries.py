"""What readers get back."""

from __future__ import annotations

from attrs import frozen


@frozen
class Entry:
    ledger_id: int
    entry_id: int
    data: bytes

    def __len__(self) -> int:
        return len(self.data)
