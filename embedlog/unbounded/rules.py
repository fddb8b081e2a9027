"""The unbounded-ledger protocol's decisions, as small pure functions.

Each is traced to the model (``ProtocolUnboundedLedgersAndGWQ.tla``) or to the
article (``shared/seeds/unbounded-ledgers.md``); tests in
``tests/unbounded/test_rules.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

# The bookie's term rule is defined below both layers (embedlog/bookie/terms.py), so that
# the bookie applies the very function this module's table tests check.
from embedlog.bookie.terms import bookie_accepts_term as bookie_accepts_term
from embedlog.wire import messages

Fragment = tuple[int, tuple[str, ...]]

# The deleted term (wire/messages.py): the bookies that raised it refuse every writer's
# adds (EINVALIDTERM), and quorum coverage of them leaves no ack quorum to any writer.
DELETED_TERM = messages.DELETED_TERM


def deleted_by_term(term: int) -> bool:
    """Whether a bookie's (or the metadata's) term says the stream is being deleted."""
    return term >= DELETED_TERM


def response_counts(request_term: int, answer_term: int) -> bool:
    """A client discards answers that carry another term than its current one."""
    return request_term == answer_term


def recovery_start(lafr: int, last_fragment_first: int) -> int:
    """The last entry known safe before recovery reads forward (reads start one above).

    Model: ``ClientReceivesFencingReadLafrResponse`` takes max(LAFR, first entry of the
    current fragment - 1): every entry below the last fragment is committed, every entry up
    to the LAFR reached its whole write set.
    """
    return max(lafr, last_fragment_first - 1)


def lafr_passes(
    entry_id: int, acks: int, write_quorum: int, last_fragment_first: int, hold: int = -1
) -> bool:
    """May the last add fully replicated advance over this acknowledged entry (taken in order)?

    Yes once its whole write set confirmed it, or once it lies below the last fragment
    (every entry there is committed, and a takeover starts at the last fragment anyway).
    ``hold`` is the highest entry whose acks were no longer tracked: the LAFR passes
    nothing while that entry is still in the last fragment.
    """
    if hold >= last_fragment_first:
        return False
    return acks >= write_quorum or entry_id < last_fragment_first


def lafr_to_send(lafr: int, at_start: int, *, recovery: bool) -> int:
    """The LAFR a writer tells bookies with its adds.

    A takeover's recovery writes do not advance it: until the takeover's closing CAS the
    write sets they filled exist only in its memory (a bookie it replaced is still listed
    in the metadata), and an aborted takeover never publishes them. A later takeover that
    trusted such a LAFR would skip recovering entries whose metadata write set still holds
    an older payload on one bookie and the aborted takeover's on another (found by the
    simulator: seed 393 of ``unbounded``). The recovery writes go out with the LAFR the
    takeover started from; the new term's writer sends its own once the metadata is OPEN.
    """
    return at_start if recovery else lafr


def rollover_due(entry_id: int, fragment_first: int, fragment_max_entries: int | None) -> bool:
    """Start a new fragment at ``entry_id``: the current one holds fragment_max_entries."""
    return bool(fragment_max_entries) and entry_id - fragment_first >= fragment_max_entries  # type: ignore[operator]


def trim_plan(
    fragments: Sequence[Fragment], before: int
) -> tuple[tuple[Fragment, ...], tuple[Fragment, ...], int]:
    """Which whole fragments lie below ``before``: (kept, dropped, first entry kept).

    A fragment is dropped when every entry of it is below ``before`` (its successor starts
    at or below ``before``). The last fragment is never dropped: it is where the writer
    writes. Partial fragments stay whole.
    """
    frags = tuple(fragments)
    cut = 0
    while cut + 1 < len(frags) and frags[cut + 1][0] <= before:
        cut += 1
    return frags[cut:], frags[:cut], frags[cut][0]


def rebase_fragments(
    ours: Sequence[Fragment], at_start: Sequence[Fragment], fresh: Sequence[Fragment]
) -> tuple[Fragment, ...] | None:
    """The fragments a takeover opens its term with when the metadata changed under it.

    ``at_start`` is what the takeover began with, ``ours`` what its write-back ended with
    (changes only from the last fragment of ``at_start`` on), ``fresh`` what the store
    holds now. A trim drops whole fragments below the last one and never touches the
    last: then the answer is ``fresh``'s fragments below our starting last fragment and
    ours from it. Anything else (the last fragment itself changed) is another writer's
    doing: None.
    """
    base = tuple(at_start)[-1]
    if not fresh or tuple(fresh)[-1] != base:
        return None
    below = tuple(f for f in fresh if f[0] < base[0])
    return below + tuple(f for f in ours if f[0] >= base[0])


def visible(is_noop: bool) -> bool:
    """Readers never see the truncate no-op entries (their ids stay taken)."""
    return not is_noop
