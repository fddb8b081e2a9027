"""The auditor's protocol rules, as small pure functions (tested in tests/auditor/test_rules.py).

Everything here works on a ledger's metadata and on what bookies said they
hold; nothing here talks to a bookie or to the metadata store.

* Which fragments are checked (``fragment_ranges``): every fragment of a
  closed ledger, the last ending at ``last_entry_id``; of an open (or
  recovering) ledger, every fragment but the last. Those are sealed: the
  writer moved to a new fragment only once every entry below it was
  acknowledged, so they end where the next begins and never change again
  (except by this repair, or by a trim dropping them from the front).
* Which entries each bookie must hold there: round-robin write sets inside
  each fragment (``write_set``). An unbounded ledger trimmed from the front
  starts at its first fragment's first entry; nothing below it exists.
* What is missing: an assigned entry that a bookie *answered* it does not hold.
  A bookie that did not answer (timeout, unreachable, EUNKNOWN, EIO) is never
  a source of "missing": its state is unknown.
* When an under-replication mark is too old.
* How re-replication swaps a replacement into the checked fragments, and
  when it may (never while a recovery or takeover is rewriting the ledger).
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Container, Iterator, Mapping, Sequence

from embedlog.metadata.ledger_metadata import LedgerMetadata, LedgerState
from embedlog.metadata.striping import write_set
from embedlog.wire.availability import AvailabilityOfEntries, SequenceGroup
from embedlog.wire.codes import StatusCode

# How a bookie's LIST_ENTRIES answer is read: EOK carries the list, ENOLEDGER is an explicit
# "I hold nothing of this ledger". Anything else (EUNKNOWN for a limbo ledger, EIO, ...) is
# no knowledge at all, like a timeout.
HOLDS_NOTHING = StatusCode.ENOLEDGER


FragmentRange = tuple[int, int, tuple[str, ...]]  # (first entry, last entry, ensemble)


def fragment_ranges(md: LedgerMetadata) -> list[FragmentRange]:
    """(first, last, ensemble) of each fragment the auditor checks, in entry order.

    A fragment ends where the next begins. A closed ledger's last fragment ends
    at ``last_entry_id``, and fragments with no entries (replaced before
    anything was written to them, or past the end) are left out. An open or
    recovering ledger's last fragment is left out: its end is not known yet
    (the writer or the recovery is still deciding it).
    """
    out = []
    frags = list(md.fragments)
    for i, (first, ensemble) in enumerate(frags):
        if i + 1 < len(frags):
            end = frags[i + 1][0] - 1
        elif md.is_closed:
            end = md.last_entry_id
        else:
            break
        if md.is_closed:
            end = min(end, md.last_entry_id)
        if first <= end:
            out.append((first, end, tuple(ensemble)))
    return out


def analysis_stands(analysed: LedgerMetadata, latest: LedgerMetadata) -> bool:
    """Whether an analysis of ``analysed`` still describes ``latest``: every fragment it
    checked is still there, with the same range and ensemble.

    An open ledger's metadata changes whenever its writer starts a fragment; that
    leaves the sealed ones alone. A swapped bookie or a trim does not.
    """
    return set(fragment_ranges(analysed)) <= set(fragment_ranges(latest))


def slot_stripes(
    first: int, last: int, ensemble_size: int, write_quorum: int, index: int
) -> list[SequenceGroup]:
    """The entries in ``[first, last]`` whose write set includes ensemble slot ``index``.

    Slot ``index`` stores entry ``e`` when ``(index - e) mod E < WQ``: the stripe
    ``[s - WQ + 1, s]`` for every ``s`` congruent to ``index`` mod E. As BP-34
    SequenceGroups: the whole stripes form one group of size WQ and period E,
    the stripes cut by ``first`` or ``last`` one group each. So a fragment slot
    is described in O(1), whatever the number of entries.
    """
    if first > last:
        return []
    e, wq = ensemble_size, write_quorum
    start = first + ((index - first) % e) - (wq - 1)  # first stripe reaching `first`
    out: list[SequenceGroup] = []
    if start < first:  # cut at the front
        out.append(SequenceGroup(first, first, min(start + wq - 1, last) - first + 1, 0))
        start += e
    if start > last:
        return out
    # Whole stripes: start + wq - 1 <= last.
    n_whole = (last - wq + 1 - start) // e + 1 if start + wq - 1 <= last else 0
    if n_whole > 0:
        last_start = start + (n_whole - 1) * e
        out.append(SequenceGroup(start, last_start, wq, e if n_whole > 1 else 0))
        start = last_start + e
    if start <= last:  # cut at the back
        out.append(SequenceGroup(start, start, last - start + 1, 0))
    return out


def slot_entries(
    first: int, last: int, ensemble_size: int, write_quorum: int, index: int
) -> Iterator[int]:
    """The entry ids of ``slot_stripes``, ascending."""
    for g in slot_stripes(first, last, ensemble_size, write_quorum, index):
        yield from g.entry_ids()


def assigned_stripes(md: LedgerMetadata) -> dict[str, list[SequenceGroup]]:
    """Bookie -> the groups of entries its write sets assign it (in entry order)."""
    out: dict[str, list[SequenceGroup]] = {}
    for first, last, ensemble in fragment_ranges(md):  # fragments are in entry order
        for index, bookie in enumerate(ensemble):
            out.setdefault(bookie, []).extend(
                slot_stripes(first, last, len(ensemble), md.write_quorum, index)
            )
    return {b: groups for b, groups in out.items() if groups}


def assigned_entries(md: LedgerMetadata) -> dict[str, list[int]]:
    """Bookie -> the entry ids its write sets assign it, over every fragment (sorted)."""
    return {
        b: sorted(e for g in groups for e in g.entry_ids())
        for b, groups in assigned_stripes(md).items()
    }


def bookies_to_ask(md: LedgerMetadata) -> list[str]:
    """The bookies the checked fragments' write sets assign at least one entry (sorted)."""
    return sorted(assigned_stripes(md))


def covers(held: AvailabilityOfEntries, want: SequenceGroup) -> bool:
    """Whether one of ``held``'s groups holds every entry of ``want``, by arithmetic.

    False means "not shown by this shortcut", not "missing": the caller then
    checks entry by entry.
    """
    groups = held.groups
    if not groups:
        return False
    starts = [g.first_sequence_start for g in groups]
    i = bisect.bisect_right(starts, want.first_sequence_start) - 1
    if i < 0:
        return False
    g = groups[i]
    if want.last_entry > g.last_entry:
        return False
    if g.first_sequence_start == g.last_sequence_start:  # one contiguous run
        return True
    offset = (want.first_sequence_start - g.first_sequence_start) % g.sequence_period
    if offset + want.sequence_size > g.sequence_size:
        return False
    single = want.first_sequence_start == want.last_sequence_start
    return single or want.sequence_period == g.sequence_period


def missing_entries(
    md: LedgerMetadata, held: Mapping[str, AvailabilityOfEntries]
) -> dict[str, list[int]]:
    """Bookie -> entries assigned to it that it answered it does not hold.

    ``held`` has an entry only for bookies that answered (EOK or ENOLEDGER, the
    latter as an empty list); bookies missing from it are unknown and never
    reported here. A fragment slot that one of the bookie's groups covers is
    settled by arithmetic; only the others are checked entry by entry.
    """
    out: dict[str, list[int]] = {}
    for bookie, stripes in assigned_stripes(md).items():
        have = held.get(bookie)
        if have is None:
            continue
        lacking = [
            e
            for want in stripes
            if not covers(have, want)
            for e in want.entry_ids()
            if not have.contains(e)
        ]
        if lacking:
            out[bookie] = sorted(lacking)
    return out


def underreplicated_too_long(since: float, now: float, threshold: float) -> bool:
    """A ledger marked under-replicated at ``since`` has waited longer than ``threshold``."""
    return now - since > threshold


def format_ids(ids: Sequence[int], limit: int = 8) -> str:
    """``0-2,5,7-9``: runs of consecutive ids; after ``limit`` runs, ``... (+N more entries)``."""
    runs: list[tuple[int, int]] = []
    for e in ids:
        if runs and e == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], e)
        else:
            runs.append((e, e))
    shown = runs[:limit]
    text = ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in shown)
    rest = sum(b - a + 1 for a, b in runs[limit:])
    if rest:
        text += f",... (+{rest} more entries)"
    return text


def copy_sources(
    md: LedgerMetadata, entry_id: int, target: str, held: Mapping[str, Container[int]]
) -> list[str]:
    """Bookies to copy ``entry_id`` from: its write set's other members that hold it first,
    then any other bookie that answered it holds it."""
    ensemble = md.ensemble_for(entry_id)
    ws = [ensemble[i] for i in write_set(entry_id, len(ensemble), md.write_quorum)]
    first = [b for b in ws if b != target and b in held and entry_id in held[b]]
    rest = sorted(b for b in held if b != target and b not in first and entry_id in held[b])
    return first + rest


def may_swap_bookies(md: LedgerMetadata) -> bool:
    """Whether re-replication may rewrite ``md``'s ensembles now.

    Not while it is IN_RECOVERY: the recovery (or an unbounded takeover) ends with a
    compare-and-swap at the version it wrote, and a swap in between would make it
    start over (bounded) or give up as if another term had won (unbounded).
    """
    return md.state is not LedgerState.IN_RECOVERY


def replacement_exclusions(ranges: Collection[FragmentRange]) -> set[str]:
    """Bookies that cannot replace one bookie in all of ``ranges`` at once: every member of
    those fragments (an ensemble never holds a bookie twice).

    Only the ensembles the new bookie joins: excluding every bookie of the ledger would
    leave no candidate for a long unbounded stream, whose fragments spread over the whole
    cluster.
    """
    return {b for _, _, ensemble in ranges for b in ensemble}


def swap_bookie(
    md: LedgerMetadata, old: str, new: str, copied: Collection[FragmentRange]
) -> LedgerMetadata | None:
    """``md`` with ``old`` replaced by ``new`` in the checked fragments whose entries were
    copied to ``new`` (``copied``, as ``fragment_ranges`` gave them), or None when none of
    them is left as it was (trimmed away, or rewritten by someone else).

    Everything else is kept: state, term, last entry, and the fragments not named, among
    them an open ledger's last fragment (``fragment_ranges`` never yields it), which its
    writer owns. ValueError if ``new`` already sits in such a fragment (an ensemble never
    holds a bookie twice).
    """
    todo = {r for r in copied if old in r[2]}
    hits = {r[0] for r in fragment_ranges(md) if r in todo}
    if not hits:
        return None
    frags = []
    for first, ensemble in md.fragments:
        if first in hits:
            if new in ensemble:
                raise ValueError(
                    f"ledger {md.ledger_id}: {new} is already in the ensemble {list(ensemble)}"
                )
            ensemble = tuple(new if b == old else b for b in ensemble)
        frags.append((first, ensemble))
    return md.evolve(fragments=tuple(frags))
