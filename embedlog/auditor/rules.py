"""The auditor's protocol rules, as small pure functions (tested in tests/auditor/test_rules.py).

Everything here works on a ledger's metadata and on what bookies said they
hold; nothing here talks to a bookie or to the metadata store.

* Which entries each bookie of a closed ledger must hold: round-robin write
  sets inside each fragment (``write_set``), fragment ``[first, next first)``,
  the last fragment ending at ``last_entry_id``.
* What is missing: an assigned entry that a bookie *answered* it does not hold.
  A bookie that did not answer (timeout, unreachable, EUNKNOWN, EIO) is never
  a source of "missing": its state is unknown.
* When an under-replication mark is too old.
* How re-replication rewrites a closed ledger's ensembles.
"""

from __future__ import annotations

import bisect
from collections.abc import Container, Iterator, Mapping, Sequence

from embedlog.auditor.availability import AvailabilityOfEntries, SequenceGroup
from embedlog.ledger.quorum import write_set
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.wire.codes import StatusCode

# How a bookie's LIST_ENTRIES answer is read: EOK carries the list, ENOLEDGER is an explicit
# "I hold nothing of this ledger". Anything else (EUNKNOWN for a limbo ledger, EIO, ...) is
# no knowledge at all, like a timeout.
HOLDS_NOTHING = StatusCode.ENOLEDGER


def fragment_ranges(md: LedgerMetadata) -> list[tuple[int, int, tuple[str, ...]]]:
    """(first, last, ensemble) of each fragment of a closed ledger that holds entries.

    A fragment ends where the next begins; the last ends at ``last_entry_id``.
    Fragments with no entries (replaced before anything was written to them, or
    past the end of the ledger) are left out.
    """
    out = []
    frags = list(md.fragments)
    for i, (first, ensemble) in enumerate(frags):
        end = frags[i + 1][0] - 1 if i + 1 < len(frags) else md.last_entry_id
        last = min(end, md.last_entry_id)
        if first <= last:
            out.append((first, last, tuple(ensemble)))
    return out


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
    """The bookies a closed ledger's write sets assign at least one entry (sorted)."""
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


def replace_bookie(md: LedgerMetadata, old: str, new: str) -> LedgerMetadata:
    """``md`` with ``old`` replaced by ``new`` in every fragment (the closed ledger's repair).

    ValueError if ``new`` already sits in a fragment with ``old`` (an ensemble
    never holds a bookie twice) or ``old`` is in no fragment.
    """
    frags = []
    found = False
    for first, ensemble in md.fragments:
        if old in ensemble:
            found = True
            if new in ensemble:
                raise ValueError(
                    f"ledger {md.ledger_id}: {new} is already in the ensemble {list(ensemble)}"
                )
            ensemble = tuple(new if b == old else b for b in ensemble)
        frags.append((first, ensemble))
    if not found:
        raise ValueError(f"ledger {md.ledger_id}: bookie {old} is in no fragment")
    return md.evolve(fragments=tuple(frags))
