"""The term rule a bookie applies to every request that carries a term (unbounded
ledgers): one function, used by the bookie's admission verdicts (verdicts.py) and
named by the unbounded protocol's rules (embedlog/unbounded/rules.py), whose table
tests check it (tests/unbounded/test_unbounded_rules.py).

Here, below both, so that the bookie need not import the unbounded layer, and a client
that imports the rule loads nothing of the bookie's storage.
"""

from __future__ import annotations


def bookie_accepts_term(stored: int, request: int) -> bool:
    """A bookie accepts a request whose term is >= its own (and raises its own to it)."""
    return request >= stored


def lafr_recorded(stored: int, request: int, lafr: int, known: int) -> bool:
    """Whether a WRITE_LAC's LAFR raises the bookie's: only one sent in the bookie's own
    term. The LAFR is the writer's claim for the write sets of its term's metadata, and a
    WRITE_LAC, unlike an add, neither raises the bookie's term nor is refused for an old
    one; so a LAFR of another term (a deposed writer's, or one the bookie has not
    raised its term to yet) is left out, and the LAC it carries still counts."""
    return request == stored and lafr > known
