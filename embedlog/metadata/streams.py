"""Stream names and durable cursors, kept in the metadata store beside the ledgers.

Layout::

    /streams/names/<name>                  the ledger id the name points at (decimal)
    /streams/cursors/<20-digit id>/<name>  a consumer's committed entry id (decimal)

Both live outside the ledger's own node on purpose: the writer changes that node by
compare-and-swap (rollovers, ensemble changes, takeovers), and a consumer committing its
position every few hundred entries would make those lose their CAS.

A name is taken by creating its node (the store's create fails when it exists: the
compare-and-swap that makes names unique). A name whose ledger is gone (a delete that
stopped between dropping the ledger and freeing its name) counts as free: the next
``register`` removes it by version and takes it. Cursors move forward by compare-and-swap
on their node's version; moving one back needs ``force``.

The calls are blocking, like the store's; the client runs them through ``ctx.meta``.
"""

from __future__ import annotations

from embedlog.errors import CursorRewindError, StreamNameTakenError
from embedlog.metadata.client import LEDGERS, ledger_path
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


def register(store: MetadataStore, name: str, ledger_id: int) -> None:
    """Point ``name`` at ``ledger_id``; StreamNameTakenError if a live stream has it."""
    path = _name_path(name)
    while True:
        try:
            store.create(path, str(ledger_id).encode())
            return
        except NodeExistsError:
            pass
        try:
            data, version = store.get(path)
        except NoNodeError:
            continue  # freed meanwhile: try again
        holder = int(data)
        if store.exists(ledger_path(holder)):
            raise StreamNameTakenError(
                f"the stream name {name!r} is taken by ledger {holder}; choose another, or "
                f"delete ledger {holder} to free it"
            )
        try:  # its ledger is gone: the name is free
            store.delete(path, version)
        except (NoNodeError, MetadataVersionError):
            pass


def lookup(store: MetadataStore, name: str) -> int | None:
    """The ledger id ``name`` points at, or None."""
    try:
        data, _ = store.get(_name_path(name))
    except NoNodeError:
        return None
    return int(data)


def names(store: MetadataStore) -> dict[str, int]:
    """Every name whose ledger still exists -> its ledger id."""
    live = {int(n) for n in store.children(LEDGERS)}
    out: dict[str, int] = {}
    for name in store.children(NAMES):
        lid = lookup(store, name)
        if lid is not None and lid in live:
            out[name] = lid
    return out


def free(store: MetadataStore, name: str, ledger_id: int) -> None:
    """Remove ``name`` if it still points at ``ledger_id`` (after the ledger was deleted)."""
    path = _name_path(name)
    try:
        data, version = store.get(path)
        if int(data) == ledger_id:
            store.delete(path, version)
    except (NoNodeError, MetadataVersionError):
        pass  # gone already, or taken anew by another ledger


# -- cursors ----------------------------------------------------------------------------------


def cursors(store: MetadataStore, ledger_id: int) -> dict[str, int]:
    base = _cursors_path(ledger_id)
    out: dict[str, int] = {}
    for name in store.children(base):
        try:
            out[name] = int(store.get(f"{base}/{name}")[0])
        except NoNodeError:
            continue  # deleted meanwhile
    return out


def commit(store: MetadataStore, ledger_id: int, name: str, entry_id: int, force: bool) -> None:
    """Store ``entry_id`` as cursor ``name``'s position, by compare-and-swap."""
    path = f"{_cursors_path(ledger_id)}/{name}"
    data = str(entry_id).encode()
    while True:
        try:
            raw, version = store.get(path)
        except NoNodeError:
            try:
                store.create(path, data)
                return
            except NodeExistsError:
                continue  # another commit created it: compare with that one
        committed = int(raw)
        if not cursor_may_move(committed, entry_id, force):
            raise CursorRewindError(
                f"ledger {ledger_id}: cursor {name!r} is at {committed}; committing "
                f"{entry_id} would move it back (pass force=True to do that)"
            )
        if committed == entry_id:
            return
        try:
            store.set(path, data, version)
            return
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


def delete_all_cursors(store: MetadataStore, ledger_id: int) -> None:
    try:
        store.delete(_cursors_path(ledger_id))
    except NoNodeError:
        pass
