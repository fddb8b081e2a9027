"""gilsteps: the same results as one ``map``, made in steps of STEP items."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import repeat

import pytest

from embedlog.bookie.gilsteps import STEP, consume_in_steps, map_in_steps

LENGTHS = [0, 1, STEP - 1, STEP, STEP + 1, 3 * STEP + 5]


@pytest.mark.parametrize("n", LENGTHS)
def test_map_in_steps_is_one_map(n: int) -> None:
    ids = list(range(n))
    got = map_in_steps(lambda a, b, c: (a, b, c), n, repeat(7), ids, map(str, ids))
    assert got == [(7, i, str(i)) for i in range(n)]


@pytest.mark.parametrize("n", LENGTHS)
def test_consume_in_steps_calls_once_per_item_in_order(n: int) -> None:
    seen: list[tuple[int, int]] = []
    consume_in_steps(lambda a, b: seen.append((a, b)), n, range(n), range(n, 2 * n))
    assert seen == [(i, n + i) for i in range(n)]


def test_a_lazy_iterable_is_pulled_one_step_at_a_time() -> None:
    """The CRCs of a flush are a lazy map: each step computes only its own."""
    pulled: list[int] = []

    def source() -> Iterator[int]:
        for i in range(2 * STEP + 1):
            pulled.append(i)
            yield i

    steps: list[int] = []

    def fn(x: int) -> int:
        if x % STEP == 0:
            steps.append(len(pulled))  # how far the source was read when a step began
        return x

    assert map_in_steps(fn, 2 * STEP + 1, source()) == list(range(2 * STEP + 1))
    assert steps == [1, STEP + 1, 2 * STEP + 1]
