"""Stream names and durable cursors, kept in the metadata store beside the ledgers.

Layout::

    /streams/names/<name>                  the ledger id the name points at (decimal)
    /streams/cursors/<20-digit id>         the stream's decided trim point (JSON)
    /streams/cursors/<20-digit id>/<name>  a consumer's committed entry id (decimal)

Both live outside the ledger's own node on purpose: the writer changes that node by
compare-and-swap (rollovers, ensemble changes, takeovers), and a consumer committing its
position every few hundred entries would make those lose their CAS.

A name is taken by creating its node (the store's create fails when it exists: the
compare-and-swap that makes names unique). A name whose ledger is gone (a delete that
stopped between dropping the ledger and freeing its name) counts as free: the next
``register`` removes it by version and takes it. Cursors move forward by compare-and-swap
on their node's version; moving one back needs ``force``.

The calls that take more than one store operation are recipes (recipe.py): called with
a store they block, like the store's own calls, and the client runs them through
``ctx.meta``; the simulator runs their operations one at a time.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from embedlog.errors import (
    CursorRewindError,
    LedgerDeletedError,
    MetadataError,
    StreamNameTakenError,
)
from embedlog.metadata import sinks
from embedlog.metadata.client import LEDGERS, ledger_path
from embedlog.metadata.recipe import Ops, Steps, delete_tree, recipe
from embedlog.metadata.store import (
    MetadataStore,
    MetadataVersionError,
    NodeExistsError,
    NoNodeError,
)

NAMES = "/streams/names"
CURSORS = "/streams/cursors"
MAX_NAME = 200


def check_name(value: object, what: str) -> str:
    """A stream or cursor name: a non-empty str usable as one path component."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__} {value!r:.40}")
    if not value or len(value) > MAX_NAME:
        raise ValueError(f"{what} must have 1 to {MAX_NAME} characters, got {len(value)}")
    if "/" in value or value in (".", "..") or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError(f"{what} {value!r} must not contain '/' or control characters")
    return value


def cursor_may_move(committed: int | None, new: int, force: bool) -> bool:
    """Whether a commit of ``new`` may replace ``committed`` (None: no position yet).

    Forward (or the same) always; backward only when asked for: a consumer that restarts
    from an older copy of its position must not silently undo a newer commit.
    """
    return committed is None or new >= committed or force


def _name_path(name: str) -> str:
    return f"{NAMES}/{name}"


def _cursors_path(ledger_id: int) -> str:
    return f"{CURSORS}/{ledger_id:020d}"


# -- names ------------------------------------------------------------------------------------


@recipe
def register(store: Ops, name: str, ledger_id: int) -> Steps[None]:
    """Point ``name`` at ``ledger_id``; StreamNameTakenError if a live stream has it."""
    path = _name_path(name)
    while True:
        try:
            yield from store.create(path, str(ledger_id).encode())
            return
        except NodeExistsError:
            pass
        try:
            data, version = yield from store.get(path)
        except NoNodeError:
            continue  # freed meanwhile: try again
        holder = int(data)
        if (yield from store.exists(ledger_path(holder))):
            raise StreamNameTakenError(
                f"the stream name {name!r} is taken by ledger {holder}; choose another, or "
                f"delete ledger {holder} to free it"
            )
        try:  # its ledger is gone: the name is free
            yield from store.delete(path, version)
        except (NoNodeError, MetadataVersionError):
            pass


def lookup(store: MetadataStore, name: str) -> int | None:
    """The ledger id ``name`` points at, or None."""
    try:
        data, _ = store.get(_name_path(name))
    except NoNodeError:
        return None
    return int(data)


@recipe
def names(store: Ops) -> Steps[dict[str, int]]:
    """Every name whose ledger still exists -> its ledger id."""
    live = {int(n) for n in (yield from store.children(LEDGERS))}
    out: dict[str, int] = {}
    for name in (yield from store.children(NAMES)):
        try:
            data, _ = yield from store.get(_name_path(name))
        except NoNodeError:
            continue  # freed meanwhile
        if int(data) in live:
            out[name] = int(data)
    return out


@recipe
def free(store: Ops, name: str, ledger_id: int) -> Steps[None]:
    """Remove ``name`` if it still points at ``ledger_id`` (after the ledger was deleted)."""
    path = _name_path(name)
    try:
        data, version = yield from store.get(path)
        if int(data) == ledger_id:
            yield from store.delete(path, version)
    except (NoNodeError, MetadataVersionError):
        pass  # gone already, or taken anew by another ledger


# -- cursors and the trim point ---------------------------------------------------------------
#
# The node ``/streams/cursors/<id>`` (the parent of the stream's cursor nodes) holds the
# stream's *decided trim point* as JSON, ``{"first_kept": F}``: every trim (retention or
# ``trim()``) first raises F by compare-and-swap on this node, deciding from cursor
# positions it read after reading F's version, and only then drops fragments below F
# from the ledger node. A commit that creates a cursor or moves one back then rewrites
# the node unchanged at the version it read before writing the cursor (a "touch"). The
# two serialize on the node's version: either the commit's touch came first, so the
# trim's read of the cursors (after it read that version) sees the commit, or the trim's
# CAS came first, so the touch fails and the commit reads the new F and touches again.
# A commit that moves an existing cursor forward needs no touch: a trim reads that
# cursor at its old or its new position, and either bounds the trim at or below the
# new one. So consumers committing forward never make each other, or a trim, retry
# (docs/unbounded.md, "Why a trim never passes a committed cursor").

_FIRST_KEPT = "first_kept"


def _guard_path(ledger_id: int) -> str:
    return _cursors_path(ledger_id)


def _parse_guard(raw: bytes) -> int:
    if not raw:  # made by a store that creates parents (ZooKeeper) before this layout
        return 0
    try:
        return int(json.loads(raw)[_FIRST_KEPT])
    except (ValueError, KeyError, TypeError) as exc:
        raise MetadataError(f"the stream's trim point node holds {raw[:60]!r}: {exc}") from exc


def _guard_bytes(first_kept: int) -> bytes:
    return json.dumps({_FIRST_KEPT: first_kept}).encode()


def deleted_error(ledger_id: int) -> LedgerDeletedError:
    return LedgerDeletedError(
        f"stream (ledger) {ledger_id} was deleted: its cursors, sink records and entries are "
        "gone; create the stream again to go on"
    )


def _check_alive(store: Ops, ledger_id: int) -> Steps[None]:
    """Raise LedgerDeletedError, after removing what a late write left of the stream, if
    the ledger is gone. Called after a write under the stream's paths: the delete drops
    the ledger node before those paths, so a write it did not remove finds it gone here."""
    if (yield from store.exists(ledger_path(ledger_id))):
        return
    yield from forget.steps(ledger_id)
    raise deleted_error(ledger_id)


@recipe
def trim_point(store: Ops, ledger_id: int) -> Steps[tuple[int, int]]:
    """(the decided trim point F, the node's version); made if the stream has none yet.

    LedgerDeletedError if the ledger is gone.
    """
    path = _guard_path(ledger_id)
    while True:
        try:
            raw, version = yield from store.get(path)
            return _parse_guard(raw), version
        except NoNodeError:
            pass
        try:  # only while the ledger is there: a delete then removes it
            yield from store.create_if(path, _guard_bytes(0), ledger_path(ledger_id))
        except NodeExistsError:
            continue
        except NoNodeError:
            raise deleted_error(ledger_id) from None


# How many times a trim decision reads the cursors again after losing its
# compare-and-swap to a new cursor or another trim before it gives up (the writer tries
# again at its next rollover or age tick): new cursors arriving faster than a decision
# takes must not hold a thread of the writer's for ever.
DECIDE_ATTEMPTS = 20


@recipe
def raise_trim_point(
    store: Ops, ledger_id: int, decide: Callable[[int, dict[str, int]], int]
) -> Steps[int]:
    """Decide and record a trim: ``decide(F, cursors)`` gives the wanted trim point from
    the decided one and the cursor positions read after it; the node keeps the higher of
    F and that (trims only ever move forward). Returns the trim point now decided, which
    the caller then applies to the ledger's fragments (F as it was if the decision lost
    its compare-and-swap ``DECIDE_ATTEMPTS`` times)."""
    path = _guard_path(ledger_id)
    first_kept = 0
    for _attempt in range(DECIDE_ATTEMPTS):
        first_kept, version = yield from trim_point.steps(ledger_id)
        # A ZooKeeper session that expired and came back may read from a server behind
        # the one that served the version: make the cursor reads at least that recent.
        yield from store.sync(_cursors_path(ledger_id))
        wanted = decide(first_kept, (yield from cursors.steps(ledger_id)))
        if wanted <= first_kept:
            return first_kept
        try:
            yield from store.set(path, _guard_bytes(wanted), version)
        except (MetadataVersionError, NoNodeError):
            continue  # a new cursor or another trim moved first: read the cursors again
        return wanted
    return first_kept


@recipe
def cursors(store: Ops, ledger_id: int) -> Steps[dict[str, int]]:
    base = _cursors_path(ledger_id)
    out: dict[str, int] = {}
    for name in (yield from store.children(base)):
        try:
            out[name] = int((yield from store.get(f"{base}/{name}"))[0])
        except NoNodeError:
            continue  # deleted meanwhile
    return out


@recipe
def commit(store: Ops, ledger_id: int, name: str, entry_id: int, force: bool) -> Steps[int]:
    """Store ``entry_id`` as cursor ``name``'s position, by compare-and-swap; returns the
    trim point decided when the commit took effect (a commit below it is a consumer that
    fell behind a trim decided first: it resumes there, as after any trim).

    LedgerDeletedError if the stream is gone (nothing is left behind).
    """
    path = f"{_cursors_path(ledger_id)}/{name}"
    first_kept, version = yield from trim_point.steps(ledger_id)
    if (yield from _write_cursor(store, ledger_id, path, name, entry_id, force)):
        while True:  # the touch: fails if a trim was decided since ``version``
            try:
                yield from store.set(_guard_path(ledger_id), _guard_bytes(first_kept), version)
                break
            except (MetadataVersionError, NoNodeError):
                yield from _check_alive(store, ledger_id)  # deleted meanwhile: clean up, say so
                first_kept, version = yield from trim_point.steps(ledger_id)
    yield from _check_alive(store, ledger_id)
    return first_kept


def _write_cursor(
    store: Ops, ledger_id: int, path: str, name: str, entry_id: int, force: bool
) -> Steps[bool]:
    """Write the cursor's node; whether a trim reading the cursors before may have seen
    it nowhere or above ``entry_id`` (it was created, or moved back): then the commit
    must touch the trim point node."""
    data = str(entry_id).encode()
    while True:
        try:
            raw, version = yield from store.get(path)
        except NoNodeError:
            try:  # only while the ledger is there: a delete then removes it
                yield from store.create_if(path, data, ledger_path(ledger_id))
                return True
            except NodeExistsError:
                continue  # another commit created it: compare with that one
            except NoNodeError:
                raise deleted_error(ledger_id) from None
        committed = int(raw)
        if not cursor_may_move(committed, entry_id, force):
            raise CursorRewindError(
                f"ledger {ledger_id}: cursor {name!r} is at {committed}; committing "
                f"{entry_id} would move it back (pass force=True to do that)"
            )
        if committed == entry_id:
            return False
        try:
            yield from store.set(path, data, version)
            return entry_id < committed
        except MetadataVersionError:
            continue  # a concurrent commit: compare again
        except NoNodeError:
            continue  # deleted meanwhile: create it


def delete_cursor(store: MetadataStore, ledger_id: int, name: str) -> bool:
    """Remove cursor ``name``; whether it existed."""
    try:
        store.delete(f"{_cursors_path(ledger_id)}/{name}")
    except NoNodeError:
        return False
    return True


@recipe
def delete_all_cursors(store: Ops, ledger_id: int) -> Steps[None]:
    """Drop the stream's cursors and its trim point node."""
    yield from delete_tree.steps(_cursors_path(ledger_id))


@recipe
def forget(store: Ops, ledger_id: int) -> Steps[None]:
    """Drop what this layer keeps of a ledger whose node its caller saw go: its cursors,
    its trim point node and its sink records. Nothing can make them again: each is made
    only while the ledger's node exists (``create_if``), and ledger ids are never reused."""
    yield from delete_all_cursors.steps(ledger_id)
    yield from sinks.delete_all.steps(ledger_id)


@recipe
def forget_deleted(store: Ops, ledger_id: int) -> Steps[bool]:
    """What a delete that failed after it dropped the ledger's node left (cursors, the trim
    point node, sink records): dropped, if anything is left and the node is gone; whether
    it was. Something left proves the ledger existed (each is made only while its node
    exists); its node gone, after a sync, then means it was deleted, for good (ids are never
    reused). Nothing left, or the node there (a ledger whose id was taken and whose node is
    not made yet, a lagging server's answer): nothing to do, and nothing of a live stream
    goes."""
    left = (yield from store.exists(_cursors_path(ledger_id))) or (
        yield from store.exists(sinks.base(ledger_id))
    )
    if not left:
        return False
    yield from store.sync(ledger_path(ledger_id))
    if (yield from store.exists(ledger_path(ledger_id))):
        return False
    yield from forget.steps(ledger_id)
    return True
