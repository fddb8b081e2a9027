"""Status codes carried in bookie responses (BookKeeper's bookie protocol codes).

Callers classify every answer into one of three outcomes, and the difference
matters for safety (see docs/design/protocol.md): positive, explicit negative
(ENOLEDGER/ENOENTRY) and unknown (everything else, including timeouts).
"""

from __future__ import annotations

import enum


class StatusCode(enum.IntEnum):
    EOK = 0
    ENOLEDGER = 1
    ENOENTRY = 2
    EBADREQ = 100
    EIO = 101
    EUA = 102
    EBADVERSION = 103
    EFENCED = 104
    EREADONLY = 105
    ETOOMANYREQUESTS = 106
    EUNKNOWN = 107
    EINVALIDTERM = 108
    # The ledger was deleted (DELETE_LEDGER or garbage collection): the bookie keeps a
    # tombstone and refuses every write to it, so a writer still holding the ledger learns.
    EDELETED = 109


class Outcome(enum.Enum):
    POSITIVE = "positive"
    NEGATIVE = "negative"
    UNKNOWN = "unknown"


def classify(status: int) -> Outcome:
    """The three-way reading of a bookie answer used by recovery and reads."""
    if status == StatusCode.EOK:
        return Outcome.POSITIVE
    if status in (StatusCode.ENOENTRY, StatusCode.ENOLEDGER):
        return Outcome.NEGATIVE
    return Outcome.UNKNOWN
