"""In a simulation, a metadata recipe (metadata/recipe.py) run through the loop's default
executor makes its store operations one round trip apart in virtual time, so another
client's operation can land between two of them, as against ZooKeeper. A recipe's
compare-and-swap can lose there, and its retry is what gets tested."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

from embedlog.metadata.memory import MemoryMetadataStore
from embedlog.metadata.recipe import Ops, Steps, recipe
from embedlog.metadata.store import MetadataVersionError
from embedlog.testing.simloop import VirtualClockLoop
from embedlog.testing.simmeta import (
    FaultyMetadataStore,
    MetadataFaults,
    MetaProfile,
    SimMetadataExecutor,
)

HOP = 0.01  # every operation's way to the store, and its answer's way back


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


def test_another_clients_write_lands_between_a_recipes_read_and_its_swap() -> None:
    loop = VirtualClockLoop()
    faults = MetadataFaults(random.Random(1), MetaProfile(delay=(HOP, HOP)), print, Counter())
    store = FaultyMetadataStore(MemoryMetadataStore(), faults)
    loop.set_default_executor(SimMetadataExecutor(loop, faults))
    store.inner.create("/x", b"a")
    served: list[str] = []
    meddled: list[asyncio.Future[int]] = []

    def on_read(op: str, path: str) -> None:
        served.append(f"{loop.time():.2f} {op} {path}")
        if not meddled:  # another client writes as soon as the recipe has read
            meddled.append(loop.run_in_executor(None, store.set, "/x", b"z", 0))

    store.watch(lambda op, path: served.append(f"{loop.time():.2f} {op} {path}"), on_read)

    async def main() -> str:
        result = await loop.run_in_executor(None, append_letter, store, "/x", "b")
        await meddled[0]
        return result

    try:
        assert loop.run_until_complete(main()) == "zb"
    finally:
        loop.close()
    # Each of the recipe's operations reaches the store a round trip after the one
    # before was answered; the other client's set lands first and the recipe's swap
    # (at 0.03, a version behind) fails, so it reads again and wins.
    assert served == ["0.01 get /x", "0.02 set /x", "0.05 get /x", "0.07 set /x"]
    assert store.inner.get("/x")[0] == b"zb"


def test_a_recipe_called_wrongly_answers_its_caller_with_the_error() -> None:
    loop = VirtualClockLoop()
    faults = MetadataFaults(random.Random(1), MetaProfile(delay=(HOP, HOP)), print, Counter())
    store = FaultyMetadataStore(MemoryMetadataStore(), faults)
    loop.set_default_executor(SimMetadataExecutor(loop, faults))

    async def main() -> str:
        try:  # a letter missing
            await loop.run_in_executor(None, append_letter, store, "/x")
        except TypeError as exc:
            return f"{loop.time():.2f} {type(exc).__name__}"
        return "answered"

    try:
        assert loop.run_until_complete(main()) == "0.02 TypeError"
    finally:
        loop.close()
