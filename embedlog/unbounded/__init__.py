"""Unbounded ledgers: one ledger as an endless stream, written by one term at a time.

The "terms for fencing only" design of ``shared/seeds/unbounded-ledgers.md``,
as model-checked in Vanlightly/bookkeeper-tlaplus
(``tweaks/ProtocolUnboundedLedgersAndGWQ.tla``). One concept per module:

* ``rules``    the protocol's decisions as pure functions (table tested)
* ``layout``   what an unbounded ledger keeps in its metadata (settings, trim point)
* ``writer``   adds of one term: term on every request, LAFR tracking, fragment
               rollover; the recovery writer with guaranteed write quorum
* ``takeover`` a new term: term CAS, LAFR fencing, recovery, truncate no-op, OPEN
* ``follow``   reads and tailing that skip no-op entries
* ``trim``     deleting whole fragments on bookies and in the metadata
* ``ledger``   ``UnboundedLedger``, the blocking public handle (API.md)
"""

from embedlog.unbounded.ledger import UnboundedLedger

__all__ = ["UnboundedLedger"]
