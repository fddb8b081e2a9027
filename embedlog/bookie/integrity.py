"""BP-46 rules: when a boot is suspicious and what phase one does to each ledger.

Pure functions, so each rule has a table test (tests/bp46/test_integrity_rules.py).
The bookie applies them in ``Bookie._phase_one`` (embedlog/bookie/boot.py) before it
serves a single request.
"""

from __future__ import annotations

from collections.abc import Iterator

from attrs import frozen

from embedlog.metadata.ledger_metadata import LedgerMetadata, LedgerState
from embedlog.metadata.striping import write_set_bookies


def suspicion_reasons(
    *,
    unclean_shutdown: bool,
    ran_without_journal: bool,
    cookie_problems: tuple[str, ...],
    protection_pending: bool,
) -> list[str]:
    """Why this boot may have lost acknowledged data (empty: it did not).

    An unclean shutdown loses acknowledged entries only when adds skipped the
    journal, in this run's configuration or the last one's. A missing or empty
    disk loses them whatever the configuration.
    """
    reasons = []
    if unclean_shutdown and ran_without_journal:
        reasons.append("unclean shutdown while adds skipped the journal")
    reasons.extend(cookie_problems)
    if protection_pending:
        reasons.append("an earlier boot or `embedlog bookie fixcookie` left protection pending")
    return reasons


@frozen
class Protection:
    """What phase one does to one ledger on this bookie."""

    fence: bool  # refuse normal adds from now on (a writer's entries could be lost here)
    limbo: bool  # never answer an explicit negative until repaired
    term: int | None  # unbounded ledgers: raise the stored term to this one


def protection_for(md: LedgerMetadata, *, owes: bool, skip_fence: bool = False) -> Protection:
    """Phase one for one ledger of the cluster (``owes``: ``owes_entries`` says this
    bookie may owe entries of it).

    A ledger it may owe entries of goes into limbo, closed ones too: we may have lost
    entries of a ledger closed just before the crash, and a read that says NoSuchEntry
    for an entry this bookie acknowledged breaks the rule every reader relies on. It is
    fenced as well (BP scenario 1 happens on a closed ledger: an empty disk must not
    acknowledge the old writer). Unbounded ledgers are not fenced, since their fence is
    the term: raising the stored term to the metadata's refuses every writer displaced
    by a takeover and keeps the current one working.

    Every other closed ledger is fenced (no limbo: nothing of it is owed here), and
    every other open stream gets its term, as the BP-46 design fences every ledger of
    the cluster: a recovery may have fenced this bookie, then replaced it in its
    write-back, and closed the ledger without it. The disk lost that fence, and the
    displaced writer, which still counts this bookie in its ensemble, would get entries
    acknowledged after the close (simulator seed 924 of ``bounded-nojournal-races``).
    An open bounded ledger that does not list it has no such writer (a writer's own
    ensemble changes are its to know): nothing to do.
    """
    if not owes:
        if md.is_closed:
            return Protection(fence=not skip_fence, limbo=False, term=None)
        if md.unbounded:
            return Protection(fence=False, limbo=False, term=None if skip_fence else md.term)
        return Protection(fence=False, limbo=False, term=None)
    if md.unbounded and not md.is_closed:
        return Protection(fence=False, limbo=True, term=None if skip_fence else md.term)
    return Protection(fence=not skip_fence, limbo=True, term=None)


def fragment_ranges(
    md: LedgerMetadata, last_entry: int
) -> Iterator[tuple[int, int, tuple[str, ...]]]:
    """(first, last, ensemble) of each fragment, clipped to ``last_entry``."""
    frags = md.fragments
    for i, (first, ensemble) in enumerate(frags):
        end = frags[i + 1][0] - 1 if i + 1 < len(frags) else last_entry
        end = min(end, last_entry)
        if first <= end:
            yield first, end, ensemble


def assigned_entries(
    md: LedgerMetadata, bookie_id: str, last_entry: int
) -> Iterator[tuple[int, list[str]]]:
    """Entries up to ``last_entry`` whose write set holds ``bookie_id``, with their peers."""
    for first, end, ensemble in fragment_ranges(md, last_entry):
        if bookie_id not in ensemble:
            continue
        for eid in range(first, end + 1):
            ws = write_set_bookies(eid, ensemble, md.write_quorum)
            if bookie_id in ws:
                yield eid, [b for b in ws if b != bookie_id]


def owes_entries(md: LedgerMetadata, bookie_id: str, *, held: bool) -> bool:
    """Whether this bookie may owe entries of the ledger, so that BP-46 phase one puts it
    in limbo (and fences it): ``held`` says whether the bookie still holds any state of it.

    Every ledger whose metadata lists the bookie; an open ledger it holds state of that
    does not list it (yet): an ensemble change adding it may be in flight; and any ledger
    being recovered or taken over (IN_RECOVERY), held or not: the recovery keeps its
    ensemble changes in memory until it closes or reopens the ledger, its write-back may
    have reached this bookie, and a bookie that lost what it had not flushed no longer
    holds even the ledger's record (simulator seed 189 of ``bounded-nojournal-races``).
    """
    if bookie_id in md.bookies():
        return True
    if md.is_closed:
        return False
    return held or md.state is LedgerState.IN_RECOVERY


def takeover_needed(md: LedgerMetadata, bookie_id: str, *, settled: bool) -> bool:
    """Whether BP-46 repair must take an open unbounded ledger over before the metadata
    can say what this bookie owes (``settled``: the repair took it over since the boot).

    A takeover in flight (the ledger IN_RECOVERY) keeps its ensemble changes in memory
    and publishes them when it ends: it may have written back entries to this bookie
    before its disk was lost, under a last fragment the metadata does not show yet.
    Taking over displaces it, so what it never published can no longer be published.
    A writer's own ensemble changes are published before it sends anything to the new
    bookie, so outside a takeover the metadata is complete for the fragments this
    bookie has left. After the repair's own takeover, anything sent to this bookie came
    after its boot: it holds it.
    """
    if md.is_closed or not md.unbounded or settled:
        return False
    if bookie_id not in md.bookies() or md.state is LedgerState.IN_RECOVERY:
        return True
    return bookie_id in md.last_fragment[1]


def repair_target(
    md: LedgerMetadata, bookie_id: str, *, recovered_end: int | None = None
) -> int | None:
    """The last entry phase two must hold before it may clear limbo, or None: not yet.

    A closed ledger ends at its last entry; open bounded ledgers are recovered (closed)
    first. An open unbounded ledger has no end of its own: what this bookie acknowledged
    and lost may lie anywhere up to the writer's newest entry, and no add that reaches
    it afterwards bounds that (a writer resends older entries too). So it is taken over
    first, as BP-46 recovers open ledgers: the takeover reads every entry of the last
    fragment that may have been acknowledged, writes them back to this bookie, and
    truncates above its no-op (``recovered_end``). A bookie the writer has left (not in
    the last fragment) is settled up to that fragment, where nobody asks it any more.
    """
    if md.is_closed:
        return md.last_entry_id
    if not md.unbounded:
        return None
    first, ensemble = md.last_fragment
    if bookie_id not in ensemble:
        return first - 1
    return recovered_end
