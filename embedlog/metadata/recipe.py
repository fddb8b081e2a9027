"""Metadata recipes: sequences of store operations, written once, run two ways.

A recipe (a cursor commit, a trim decision, taking a stream's name) is several store
operations with decisions between them. It is correct only because a compare-and-swap
fails when another client got in between two of its operations, so what matters is
exactly what may land between them.

A recipe is written as a generator over ``Ops``: ``raw, version = yield from
store.get(path)`` hands the operation out and receives its result, or has its error
raised at that line. It does no I/O of its own (sans-I/O), so whoever runs it decides
when each operation reaches the store:

- ``Recipe.__call__`` runs it in the calling thread against a real store, one operation
  after the other, as a plain function would (on ZooKeeper each is one round trip, and
  other clients' operations land between them);
- the simulator (testing/simmeta.py) runs each operation at a moment of its own in
  virtual time, so that other clients' operations land between them there too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

from attrs import frozen

from embedlog.metadata.store import ANY_VERSION, MetadataStore, NoNodeError

P = ParamSpec("P")
T = TypeVar("T")


@frozen
class Op:
    """One store operation a recipe asks for: ``MetadataStore.<method>(*args)``."""

    method: str
    args: tuple[Any, ...]

    def apply(self, store: MetadataStore) -> Any:
        return getattr(store, self.method)(*self.args)


# A recipe's steps: yields operations, is sent each one's result, returns the outcome.
Steps = Generator[Op, Any, T]


class Ops:
    """The store as a recipe sees it: each method hands its operation out (``yield
    from``) and returns what the store answered (or raises what it raised)."""

    def create(self, path: str, data: bytes) -> Steps[int]:
        return (yield Op("create", (path, data)))

    def create_if(self, path: str, data: bytes, exists: str) -> Steps[int]:
        return (yield Op("create_if", (path, data, exists)))

    def get(self, path: str) -> Steps[tuple[bytes, int]]:
        return (yield Op("get", (path,)))

    def set(self, path: str, data: bytes, version: int) -> Steps[int]:
        return (yield Op("set", (path, data, version)))

    def delete(self, path: str, version: int = ANY_VERSION) -> Steps[None]:
        return (yield Op("delete", (path, version)))

    def children(self, path: str) -> Steps[list[str]]:
        return (yield Op("children", (path,)))

    def sync(self, path: str) -> Steps[None]:
        return (yield Op("sync", (path,)))

    def exists(self, path: str) -> Steps[bool]:
        return (yield Op("exists", (path,)))


OPS = Ops()  # holds nothing: one serves every recipe


def run(store: MetadataStore, steps: Steps[T]) -> T:
    """Run a recipe's steps against ``store`` in this thread, one operation after the
    other; its outcome, or what it raised."""
    try:
        op = next(steps)
        while True:
            failure: Exception | None = None
            try:
                result = op.apply(store)
            except Exception as exc:  # the recipe's to handle, at its ``yield from``
                failure = exc
            # Thrown outside the handler: what the recipe raises next is not chained to
            # the operation's error (it did handle it), as in the plain function it was.
            op = steps.send(result) if failure is None else steps.throw(failure)
    except StopIteration as stop:
        outcome: T = stop.value
        return outcome


class Recipe(Generic[P, T]):
    """A recipe called like a function of the store (``recipe(store, *args)``), which is
    how ``MetadataClient.call`` and the executors run it; ``steps`` gives its generator
    to a caller that runs the operations itself (the simulator)."""

    def __init__(self, steps: Callable[Concatenate[Ops, P], Steps[T]]) -> None:
        self._steps = steps
        functools.update_wrapper(self, steps)

    def steps(self, *args: P.args, **kwargs: P.kwargs) -> Steps[T]:
        return self._steps(OPS, *args, **kwargs)

    def __call__(self, store: MetadataStore, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return run(store, self._steps(OPS, *args, **kwargs))

    def __repr__(self) -> str:
        return f"<recipe {self.__qualname__}>"  # type: ignore[attr-defined]


def recipe(steps: Callable[Concatenate[Ops, P], Steps[T]]) -> Recipe[P, T]:
    """Make a generator function over ``Ops`` a ``Recipe``."""
    return Recipe(steps)


@recipe
def delete_tree(store: Ops, path: str) -> Steps[None]:
    """Delete ``path`` and everything below it, whatever is already gone. The memory and
    LevelDB stores imply parents without making them nodes, and deleting a node that
    does not exist deletes nothing below it: the children go first, one by one."""
    for child in (yield from store.children(path)):
        try:
            yield from store.delete(f"{path}/{child}")
        except NoNodeError:
            pass
    try:
        yield from store.delete(path)
    except NoNodeError:
        pass
