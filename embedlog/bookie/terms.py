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
