"""Metadata recipes (metadata/recipe.py) run against a store in the calling thread: each
operation's result comes back at its ``yield from``, and its error is raised there, for
the recipe to handle or to pass on."""

from __future__ import annotations

import pytest

from embedlog.metadata.memory import MemoryMetadataStore
from embedlog.metadata.recipe import Op, Ops, Steps, delete_tree, recipe
from embedlog.metadata.store import MetadataStore, MetadataVersionError, NoNodeError


class Recording(MemoryMetadataStore):
    """A memory store that notes each operation it serves, and changes ``/x`` behind the
    caller's back once, right after the first read of it (another client's write)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []
        self.meddle = True

    def get(self, path: str) -> tuple[bytes, int]:
        self.ops.append(f"get {path}")
        out = super().get(path)
        if path == "/x" and self.meddle:
            self.meddle = False
            super().set("/x", b"other", out[1])
        return out

    def set(self, path: str, data: bytes, version: int) -> int:
        self.ops.append(f"set {path} {data.decode()} @{version}")
        return super().set(path, data, version)


@recipe
def append_letter(store: Ops, path: str, letter: str) -> Steps[str]:
    """Read-modify-write by compare-and-swap, again after each lost race."""
    while True:
        data, version = yield from store.get(path)
        try:
            yield from store.set(path, data + letter.encode(), version)
        except MetadataVersionError:
            continue
        return (data + letter.encode()).decode()


def test_a_recipe_gets_each_result_and_handles_the_error_at_its_operation() -> None:
    store = Recording()
    store.create("/x", b"a")
    # The first compare-and-swap loses to the write made behind its back; the recipe
    # catches that at its ``set`` and reads again.
    assert append_letter(store, "/x", "b") == "otherb"
    assert store.ops == ["get /x", "set /x ab @0", "get /x", "set /x otherb @1"]
    assert store.get("/x")[0] == b"otherb"


def test_an_error_the_recipe_does_not_handle_reaches_its_caller() -> None:
    with pytest.raises(NoNodeError):
        append_letter(MemoryMetadataStore(), "/missing", "b")


@recipe
def read_or_refuse(store: Ops, path: str) -> Steps[bytes]:
    try:
        data, _ = yield from store.get(path)
    except NoNodeError:
        data = b""
    if not data:
        raise LookupError(f"{path} is empty or missing")
    return data


def test_what_a_recipe_raises_after_handling_an_error_is_not_chained_to_it() -> None:
    with pytest.raises(LookupError) as raised:
        read_or_refuse(MemoryMetadataStore(), "/missing")
    assert raised.value.__context__ is None  # the NoNodeError was handled


def test_a_recipe_hands_out_operations_and_runs_none_itself() -> None:
    steps = append_letter.steps("/x", "b")
    assert next(steps) == Op("get", ("/x",))
    assert steps.send((b"a", 4)) == Op("set", ("/x", b"ab", 4))
    with pytest.raises(StopIteration) as done:
        steps.send(5)
    assert done.value.value == "ab"


def test_delete_tree_removes_what_is_below_then_the_node_whatever_is_gone() -> None:
    store: MetadataStore = MemoryMetadataStore()
    for path in ("/t", "/t/a", "/t/b", "/keep"):
        store.create(path, b"")
    delete_tree(store, "/t")
    assert not store.exists("/t") and store.children("/t") == [] and store.exists("/keep")
    delete_tree(store, "/t")  # gone already: nothing to do, no error
