"""Test-only mutants of the stream layer: each breaks one promise the simulator's stream
rules (embedlog/testing/oracle_streams.py) must catch. A mutant is a context manager that
patches the real code in this process (run seeds with ``run_seed``, not in workers)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from seed_search import patched

from embedlog.client import Client
from embedlog.metadata import streams
from embedlog.metadata.recipe import Ops, Steps, recipe
from embedlog.metadata.store import ANY_VERSION, NodeExistsError
from embedlog.unbounded import retention, trim


def stale_cursors() -> Any:
    """Retention decides from cursor positions read before its decision (issue #27's
    race): a commit that lands in between is passed over."""
    decide = trim.decide

    async def stale(ctx: Any, md: Any, wanted: Callable[[int, dict[str, int]], int]) -> int:
        positions = await ctx.meta(streams.cursors, ctx.metadata.store, md.ledger_id)
        return await decide(ctx, md, lambda first, _now: wanted(first, positions))

    return patched(trim, "decide", stale)


def limit_too_far() -> Any:
    """Retention's point lies a few entries beyond what its limits ask for."""
    limit_point = retention.limit_point
    return patched(retention, "limit_point", lambda *a, **k: limit_point(*a, **k) + 4)


def commit_ignores_delete() -> Any:
    """A commit writes the cursor without looking at the stream (deleted or not)."""

    @recipe
    def commit(store: Ops, ledger_id: int, name: str, entry_id: int, force: bool) -> Steps[int]:
        path = f"{streams.CURSORS}/{ledger_id:020d}/{name}"
        data = str(entry_id).encode()
        try:
            yield from store.create(path, data)
        except NodeExistsError:
            yield from store.set(path, data, ANY_VERSION)
        return 0

    return patched(streams, "commit", commit)


def new_cursor_untouched() -> Any:
    """A commit that creates its cursor does not touch the trim point node: a trim that
    read the cursors before the creation decides past the new cursor (only the
    interleaving of a recipe's store operations opens that window)."""
    write = streams._write_cursor

    def untouched(
        store: Ops, ledger_id: int, path: str, name: str, entry_id: int, force: bool
    ) -> Steps[bool]:
        existed = yield from store.exists(path)
        moved_back = yield from write(store, ledger_id, path, name, entry_id, force)
        return moved_back and existed

    return patched(streams, "_write_cursor", untouched)


def retried_delete_leaves_leftovers() -> Any:
    """A delete of a ledger whose node is gone only says so: what an earlier delete that
    failed after dropping the node left of the stream (cursors, sink records) stays."""

    async def nothing(self: Client, ledger_id: int) -> None:
        return None

    return patched(Client, "_finish_earlier_delete", nothing)


MUTANTS: dict[str, Callable[[], Any]] = {
    "stale-cursors": stale_cursors,
    "limit-too-far": limit_too_far,
    "commit-ignores-delete": commit_ignores_delete,
    "new-cursor-untouched": new_cursor_untouched,
    "retried-delete-leaves-leftovers": retried_delete_leaves_leftovers,
}
