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

from collections.abc import Container, Iterator, Mapping, Sequence

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


def slot_entries(
    first: int, last: int, ensemble_size: int, write_quorum: int, index: int
) -> Iterator[int]:
    """Entry ids in ``[first, last]`` whose write set includes ensemble slot ``index``.

    Slot ``index`` stores entry ``e`` when ``(index - e) mod E < WQ``: it walks
    the range a stripe at a time instead of testing every entry's write set.
    """
    if first > last:
        return
    # The first entry at or after `first` whose write set starts at slot `index`.
    e = first + ((index - first) % ensemble_size)
    # Slot `index` is the k-th member of the write set starting at slot index-k, i.e. of
    # entries e - k for k in 0..WQ-1. Walk stripes: each stripe [s - WQ + 1, s] where s is an
    # entry starting at this slot.
    start = e - (write_quorum - 1)
    while start <= last:
        yield from range(max(start, first), min(start + write_quorum - 1, last) + 1)
        start += ensemble_size


def assigned_entries(md: LedgerMetadata) -> dict[str, list[int]]:
    """Bookie -> the entry ids its write sets assign it, over every fragment (sorted)."""
    out: dict[str, list[int]] = {}
    for first, last, ensemble in fragment_ranges(md):
        for index, bookie in enumerate(ensemble):
            ids = out.setdefault(bookie, [])
            ids.extend(slot_entries(first, last, len(ensemble), md.write_quorum, index))
    return {b: sorted(set(ids)) for b, ids in out.items() if ids}


def bookies_to_ask(md: LedgerMetadata) -> list[str]:
    """The bookies a closed ledger's write sets assign at least one entry (sorted)."""
    return sorted(assigned_entries(md))


def missing_entries(md: LedgerMetadata, held: Mapping[str, Container[int]]) -> dict[str, list[int]]:
    """Bookie -> entries assigned to it that it answered it does not hold.

    ``held`` has an entry only for bookies that answered (EOK or ENOLEDGER, the
    latter as an empty container); bookies missing from it are unknown and
    never reported here.
    """
    out: dict[str, list[int]] = {}
    for bookie, ids in assigned_entries(md).items():
        have = held.get(bookie)
        if have is None:
            continue
        lacking = [e for e in ids if e not in have]
        if lacking:
            out[bookie] = lacking
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
