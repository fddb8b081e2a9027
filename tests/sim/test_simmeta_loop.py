"""The simulation's metadata calls (``run_in_executor(None, ...)``, served on the loop by
``SimMetadataExecutor``) hand back the loop's own future: the same steps at the same
virtual times as asyncio's chaining of a concurrent future to it, without one."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from embedlog.errors import MetadataError
from embedlog.testing.simloop import VirtualClockLoop
from embedlog.testing.simmeta import MetadataFaults, MetaProfile, SimMetadataExecutor


def _history(run: Callable[[asyncio.AbstractEventLoop, Callable[..., Any]], Any]) -> list[str]:
    """What four metadata calls did, and when: answered, failed, given up before it left
    (never run) and given up after it left (run, its answer dropped)."""
    loop = VirtualClockLoop()
    profile = MetaProfile(delay=(0.01, 0.02))
    faults = MetadataFaults(random.Random(3), profile, lambda *e: None, Counter(), None)
    loop.set_default_executor(SimMetadataExecutor(loop, faults))
    seen: list[str] = []

    def op(name: str, fail: bool = False) -> str:
        seen.append(f"{loop.time():.6f} {name} runs")
        if fail:
            raise MetadataError(f"{name} failed")
        return name

    async def caller(name: str, fail: bool = False, give_up: float | None = None) -> None:
        fut = run(loop, lambda: op(name, fail))
        if give_up is not None:
            loop.call_later(give_up, fut.cancel)
        try:
            seen.append(f"{loop.time():.6f} {name} -> {await fut}")
        except (MetadataError, asyncio.CancelledError) as exc:
            seen.append(f"{loop.time():.6f} {name} -> {type(exc).__name__}")

    async def main() -> None:
        await asyncio.gather(
            caller("a"),
            caller("b", fail=True),
            caller("c", give_up=0.0),
            caller("d", give_up=0.025),
            return_exceptions=True,
        )

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    return seen


def _on_the_loop(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any]) -> Any:
    return loop.run_in_executor(None, fn)


def _chained(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any]) -> Any:
    executor = loop._default_executor  # type: ignore[attr-defined]
    return asyncio.wrap_future(executor.submit(fn), loop=loop)


def test_a_metadata_call_on_the_loop_does_what_the_chained_one_did() -> None:
    served = _history(_on_the_loop)
    assert served == _history(_chained)
    assert sorted(e.split(" ", 1)[1] for e in served if "runs" in e) == [
        "a runs",
        "b runs",
        "d runs",
    ]
    assert any(e.endswith("b -> MetadataError") for e in served)
    assert any(e.endswith("d -> CancelledError") for e in served)


def test_a_metadata_call_on_the_loop_makes_no_concurrent_future(monkeypatch: Any) -> None:
    def refuse(*args: Any) -> Any:
        raise AssertionError("a concurrent future was made")

    monkeypatch.setattr(SimMetadataExecutor, "submit", refuse)
    assert len(_history(_on_the_loop)) == 7


def test_a_closed_loop_takes_no_more_metadata_calls() -> None:
    loop = VirtualClockLoop()
    loop.close()
    with pytest.raises(RuntimeError, match="closed"):
        loop.run_in_executor(None, lambda: None)
