"""Which requests must prove a ledger's master key, and whether one does.

A bookie keeps each ledger's master key (``master_key(password)``, 20 bytes, never
empty) and refuses with EUA any request that would change the ledger's state without
it: adds of every kind, fencing and term-carrying reads, WRITE_LAC, TRIM and
DELETE_LEDGER. A refused request changes nothing; in particular it never creates
state for a ledger the bookie does not know.

What the key cannot protect: a ledger the bookie knows nothing of binds the key of the
first request that creates its state there (BookKeeper does the same). docs/security.md
says how that is mitigated. A ledger the bookie dropped is not one it knows nothing of:
its tombstone keeps its key, and nothing creates its state again (tombstones.py).

Reads that change nothing (plain and recovery reads without a fence or a term,
READ_LAC, LIST_ENTRIES) need no key, as in BookKeeper.
"""

from __future__ import annotations

import enum
import hmac

from embedlog.bookie.index import LedgerInfo
from embedlog.wire.messages import NO_TERM, OpCode, ReadFlags, Request

MASTER_KEY_SIZE = 20  # what ``embedlog.wire.entry.master_key`` makes

# Ops that change a ledger's state whatever their flags.
_ALWAYS = frozenset(
    {OpCode.ADD, OpCode.ADD_BATCH, OpCode.WRITE_LAC, OpCode.TRIM, OpCode.DELETE_LEDGER}
)


class KeyVerdict(enum.Enum):
    KEYLESS = "keyless"  # the request changes nothing: no key needed
    PROVEN = "proven"  # the key the bookie holds for the ledger
    FIRST = "first"  # the bookie holds nothing of the ledger: the key binds to what it creates
    REFUSED = "refused"  # answer EUA and change nothing


def needs_key(req: Request) -> bool:
    """Whether ``req`` would change the ledger's state (and so must carry its key)."""
    if req.op in _ALWAYS:
        return True
    if req.op == OpCode.READ:
        return bool(req.flags & ReadFlags.FENCE) or req.term != NO_TERM
    return False


def key_verdict(req: Request, info: LedgerInfo | None) -> KeyVerdict:
    """What ``req`` proves, given what the bookie holds of its ledger (``info``; None when
    it holds nothing).

    A record whose key is empty matches no key: such a record (BP-46 protection or
    repair of a ledger whose metadata holds no key) must not let the first caller claim
    a ledger whose entries and fence the bookie already keeps.
    """
    if not needs_key(req):
        return KeyVerdict.KEYLESS
    sent = req.master_key
    if len(sent) != MASTER_KEY_SIZE:
        return KeyVerdict.REFUSED
    if info is None:
        return KeyVerdict.FIRST
    # In constant time: how long a refusal takes must not tell how much of a guess matched.
    if info.master_key and hmac.compare_digest(info.master_key, sent.hex()):
        return KeyVerdict.PROVEN
    return KeyVerdict.REFUSED
