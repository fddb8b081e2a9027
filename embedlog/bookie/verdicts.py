"""Whether a bookie admits a request: pure functions over (the request, what the bookie
holds of its ledger, the bookie's mode), each returning a Verdict. The bookie asks one
and carries it out: it stores and changes state only for an admitted request, and
answers any other with the verdict's status. Table-tested in
tests/bookie/test_verdicts.py.

The rules, in the order each function applies them (the first that refuses decides):

* read-only: a read-only bookie refuses adds (EREADONLY); it serves everything else.
* well-formed: a body or header the request cannot be carried out with: EBADREQ.
* deleted: a ledger the bookie dropped refuses every change (EDELETED; a repeated
  DELETE_LEDGER is done already: EOK) and is read as one it never held
  (tombstones.py, ``tombstone_verdict``).
* key: a request that would change a ledger's state must prove its master key, or
  EUA (keys.py, ``key_verdict``).
* fence: a fenced ledger takes only recovery adds (EFENCED).
* term: a request carrying a term below the ledger's is refused with EINVALIDTERM and
  the ledger's term; a higher one raises the ledger's (terms.py, the rule the
  unbounded protocol's table tests check).
* limbo (BP-46): a ledger in limbo may have lost entries it acknowledged, so its
  negatives (NoSuchEntry, NoSuchLedger, a list of entries) become EUNKNOWN.

``unsafe_skip_limbo`` (tests only) is part of the mode: it turns the limbo rule off.
"""

from __future__ import annotations

from attrs import frozen

from embedlog.bookie.index import LedgerInfo
from embedlog.bookie.keys import KeyVerdict, key_verdict
from embedlog.bookie.terms import bookie_accepts_term
from embedlog.bookie.tombstones import tombstone_verdict
from embedlog.wire.codes import StatusCode
from embedlog.wire.messages import NO_TERM, AddFlags, ReadFlags, Request

NEW_LEDGER_TERM = LedgerInfo().term  # the term of a ledger's state when a request creates it


@frozen
class Mode:
    """What of the bookie as a whole its verdicts depend on."""

    readonly: bool = False  # configured, or a disk that failed (flushing.py)
    skip_limbo: bool = False  # bookie setting unsafe_skip_limbo (tests only)


@frozen
class Verdict:
    """Admit the request (``admitted``), with the state changes that admitting it makes;
    or answer ``status`` now and change nothing."""

    status: StatusCode = StatusCode.EOK
    admitted: bool = True
    term: int = NO_TERM  # what an EINVALIDTERM refusal carries: the ledger's term
    dropped: bool = False  # the answer is about a ledger this bookie dropped (tombstones.py)
    creates: bool = False  # the request makes the ledger's first state here
    raises_term: bool = False  # the ledger's term goes up to the request's
    fences: bool = False  # the request fences the ledger
    # The answer relies on the ledger's state (its fence, its term) being durable: the
    # bookie journals the change, or waits for the record of one already made.
    relies_on_state: bool = False


def _admit(creates: bool, raises_term: bool, fences: bool, relies_on_state: bool) -> Verdict:
    return Verdict(
        creates=creates, raises_term=raises_term, fences=fences, relies_on_state=relies_on_state
    )


# Built once: the add path (the bookie's hot path) allocates no verdict.
_ADMITS = {
    (c, r, f, s): _admit(c, r, f, s)
    for c in (False, True)
    for r in (False, True)
    for f in (False, True)
    for s in (False, True)
}
ADMIT = _ADMITS[False, False, False, False]
_REFUSED = {s: Verdict(s, admitted=False) for s in StatusCode}
_DROPPED = {s: Verdict(s, admitted=False, dropped=True) for s in StatusCode}


def refused(status: StatusCode, term: int = NO_TERM) -> Verdict:
    """Answer ``status`` (carrying ``term``, for EINVALIDTERM) and change nothing."""
    if term == NO_TERM:
        return _REFUSED[status]
    return Verdict(status, admitted=False, term=term)


def _deleted(req: Request, info: LedgerInfo | None, tombstone: bytes | None) -> Verdict | None:
    """The verdict for a request that would change a ledger this bookie dropped; None if
    the ledger is not one (or the request changes nothing)."""
    if info is not None or tombstone is None:
        return None  # a dropped ledger has no state here
    status = tombstone_verdict(req, tombstone)
    return None if status is None else _DROPPED[status]


def _term(req: Request, stored: int) -> Verdict | None:
    """EINVALIDTERM for a term below the ledger's; None when the term rule admits it."""
    if req.term == NO_TERM or bookie_accepts_term(stored, req.term):
        return None
    return refused(StatusCode.EINVALIDTERM, stored)


def add_verdict(
    req: Request, info: LedgerInfo | None, tombstone: bytes | None, mode: Mode, well_formed: bool
) -> Verdict:
    """ADD and ADD_BATCH. ``info``: the ledger's state here (None: none); ``tombstone``:
    the key its tombstone keeps, when the bookie dropped it; ``well_formed``: the body
    holds what the request says (a plain add's header names its ledger and entry, a
    batch holds at least one such entry and none above the size limit).

    In two steps the bookie takes one at a time: an add that ``add_refused_as_sent``
    refuses is answered without the ledger's state being read."""
    early = add_refused_as_sent(mode, well_formed)
    return early if early is not None else ledger_admits_add(req, info, tombstone)


def add_refused_as_sent(mode: Mode, well_formed: bool) -> Verdict | None:
    """What refuses an add whatever its ledger's state; None when nothing does."""
    if mode.readonly:
        return _REFUSED[StatusCode.EREADONLY]
    if not well_formed:
        return _REFUSED[StatusCode.EBADREQ]
    return None


def ledger_admits_add(req: Request, info: LedgerInfo | None, tombstone: bytes | None) -> Verdict:
    """The add's verdict from its ledger's state (``add_verdict``'s second step)."""
    if tombstone is not None and (dropped := _deleted(req, info, tombstone)) is not None:
        return dropped
    if key_verdict(req, info) is KeyVerdict.REFUSED:
        return _REFUSED[StatusCode.EUA]
    if info is None:
        stored = NEW_LEDGER_TERM
    else:
        if info.fenced and not req.flags & AddFlags.RECOVERY:
            return _REFUSED[StatusCode.EFENCED]
        stored = info.term
    if req.term != NO_TERM and (stale := _term(req, stored)) is not None:
        return stale
    raises = req.term != NO_TERM and req.term != stored
    return _ADMITS[info is None, raises, False, False]


def read_verdict(req: Request, info: LedgerInfo | None, tombstone: bytes | None) -> Verdict:
    """READ. A plain or recovery read changes nothing and is admitted as it is; a fencing
    or term-carrying one changes the ledger's state, and its answer relies on that state
    being durable (a fence a crash forgets lets the old writer reach its ack quorum after
    recovery closed the ledger: BP-46 scenario 1)."""
    key = key_verdict(req, info)
    if key is KeyVerdict.REFUSED:
        return _REFUSED[StatusCode.EUA]
    if key is KeyVerdict.KEYLESS:
        return ADMIT
    if (dropped := _deleted(req, info, tombstone)) is not None:
        return dropped
    stored = NEW_LEDGER_TERM if info is None else info.term
    if (stale := _term(req, stored)) is not None:
        return stale
    raises = req.term != NO_TERM and req.term != stored
    fences = bool(req.flags & ReadFlags.FENCE) and not (info is not None and info.fenced)
    return _ADMITS[info is None, raises, fences, True]


def change_verdict(req: Request, info: LedgerInfo | None, tombstone: bytes | None) -> Verdict:
    """WRITE_LAC, DELETE_LEDGER and TRIM below: a change to a ledger the bookie holds
    (ENOLEDGER when it holds nothing; a repeated DELETE_LEDGER of a dropped ledger is
    done already, EOK)."""
    if (dropped := _deleted(req, info, tombstone)) is not None:
        return dropped
    if key_verdict(req, info) is KeyVerdict.REFUSED:
        return _REFUSED[StatusCode.EUA]
    if info is None:
        return _REFUSED[StatusCode.ENOLEDGER]
    return ADMIT


def trim_above_verdict(
    req: Request, info: LedgerInfo | None, tombstone: bytes | None, well_formed: bool
) -> Verdict:
    """TRIM ABOVE (unbounded ledgers): it must carry a term (once per term is its rule),
    and a body naming the ledger's digest length (``well_formed``)."""
    if req.term == NO_TERM:
        return _REFUSED[StatusCode.EBADREQ]
    if (dropped := _deleted(req, info, tombstone)) is not None:
        return dropped
    if key_verdict(req, info) is KeyVerdict.REFUSED:
        return _REFUSED[StatusCode.EUA]
    if not well_formed:
        return _REFUSED[StatusCode.EBADREQ]
    stored = NEW_LEDGER_TERM if info is None else info.term
    if (stale := _term(req, stored)) is not None:
        return stale
    return _ADMITS[info is None, req.term != stored, False, True]


def read_batch_verdict(req: Request, well_formed: bool) -> Verdict:
    """READ_BATCH changes nothing and so carries no flags and no term, from an entry id
    (``well_formed``: its body is one ask)."""
    if not well_formed or req.flags or req.term != NO_TERM or req.entry_id < 0:
        return _REFUSED[StatusCode.EBADREQ]
    return ADMIT


def negative(info: LedgerInfo | None, status: StatusCode, mode: Mode) -> StatusCode:
    """The answer for an entry (ENOENTRY) or ledger (ENOLEDGER) the bookie does not hold:
    that negative, unless the ledger is in limbo; then the bookie cannot know."""
    if info is not None and info.limbo and not mode.skip_limbo:
        return StatusCode.EUNKNOWN
    return status


def listing_verdict(info: LedgerInfo | None, mode: Mode) -> Verdict:
    """LIST_ENTRIES. A list is an explicit negative for every id it leaves out, and a
    limbo ledger may have lost entries it acknowledged: the auditor must not take the
    holes for missing data (nor an empty list for "nothing was ever here")."""
    if info is None:
        return _REFUSED[StatusCode.ENOLEDGER]
    if info.limbo and not mode.skip_limbo:
        return _REFUSED[StatusCode.EUNKNOWN]
    return ADMIT
