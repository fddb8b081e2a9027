"""Where a test-only mutant is caught: its pinned seed first, then seeds 0, 1, ... up to a
bound. A change to the simulator or the protocol code may move the first violating seed;
the test then still holds (the mutant is caught within the bound) and says where to pin."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from embedlog.testing.sim import run_seed

_ABSENT = object()


@contextmanager
def patched(owner: Any, name: str, value: object) -> Iterator[None]:
    """A test-only mutant: ``owner.name`` (a module's or a class's own attribute) is
    ``value`` while the block runs, then what it was."""
    before = vars(owner).get(name, _ABSENT)
    setattr(owner, name, value)
    try:
        yield
    finally:
        if before is _ABSENT:
            delattr(owner, name)
        else:
            setattr(owner, name, before)


def violations(
    mutant: Callable[[], AbstractContextManager[object]], scenario: str, seed: int
) -> list[str]:
    """The invariants seed ``seed`` of ``scenario`` violates with ``mutant`` in place."""
    with mutant():
        return [v.invariant for v in run_seed(seed, scenario, keep_trace=False).violations]


def first_caught(
    mutant: Callable[[], AbstractContextManager[object]],
    scenario: str,
    pinned: int,
    search: int,
    invariant: str | None = None,
) -> tuple[int, list[str]]:
    """The first seed (the pinned one tried first) at which ``mutant`` violates
    ``invariant`` (any invariant when None), and what it violates there; fails the test
    when no seed below ``search`` does."""

    def seeds() -> Iterator[int]:
        yield pinned
        yield from range(search)

    for seed in seeds():
        seen = violations(mutant, scenario, seed)
        if seen and (invariant is None or invariant in seen):
            if seed != pinned:
                print(f"the mutant is caught at seed {seed} of {scenario} now (pinned: {pinned})")
            return seed, seen
    raise AssertionError(f"the mutant is not caught in {search} seeds of {scenario}")


def caught_then_clean(
    mutant: Callable[[], AbstractContextManager[object]],
    scenario: str,
    pinned: int,
    search: int,
    invariant: str,
    exercised: str,
) -> int:
    """``first_caught`` for ``invariant``; then the same seed without the mutant holds
    every invariant and counts ``exercised`` (the rule or fault the mutant breaks was
    there to be broken). The seed it is caught at."""
    seed, _ = first_caught(mutant, scenario, pinned, search, invariant)
    clean = run_seed(seed, scenario, keep_trace=False)
    assert clean.ok, [str(v) for v in clean.violations]
    assert clean.counts[exercised] > 0, exercised
    return seed
