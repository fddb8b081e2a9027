"""AddBudget (embedlog/ledger/admission.py) on its own: who waits, who gets room, in
which order, and what a shut budget tells its waiters."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from embedlog.errors import EntryTooLargeError, LedgerClosedError, TooManyAddsInFlightError
from embedlog.ledger.admission import AddBudget, entry_bytes


class OffLoop:
    """A runtime whose loop thread is some other thread."""

    in_loop = False


class OnLoop:
    in_loop = True


def wait_until(predicate) -> None:
    while not predicate():
        time.sleep(0.005)


def test_room_by_entries_and_by_bytes():
    budget = AddBudget(3, 100, 0, "ledger 7")
    budget.take(60, OffLoop())
    with pytest.raises(TooManyAddsInFlightError, match=r"ledger 7: 1 adds \(60 bytes\)"):
        budget.take(41, OffLoop())  # the bytes bound
    budget.take(40, OffLoop())
    budget.take(0, OffLoop())
    with pytest.raises(TooManyAddsInFlightError, match="max_adds_in_flight=3"):
        budget.take(0, OffLoop())  # the entries bound
    budget.release(3, 100)
    assert (budget.entries, budget.bytes) == (0, 0)


def test_a_lone_add_always_fits():
    budget = AddBudget(1, 10, 0, "x")
    budget.take(50, OffLoop())  # above the bytes bound, but nothing else is in flight
    assert budget.entries == 1


def test_a_waiting_thread_gets_room_on_release():
    budget = AddBudget(1, 100, None, "x")
    budget.take(1, OffLoop())
    got = threading.Event()
    waiter = threading.Thread(target=lambda: (budget.take(1, OffLoop()), got.set()))
    waiter.start()
    wait_until(lambda: budget.waiting == 1)
    assert not got.is_set()
    budget.release(1, 1)
    assert got.wait(30)
    waiter.join()
    assert (budget.entries, budget.waiting) == (1, 0)


def test_no_waiting_on_the_loop_thread_or_when_asked_not_to():
    budget = AddBudget(1, 100, None, "x")
    budget.take(1, OffLoop())
    with pytest.raises(TooManyAddsInFlightError, match="loop thread"):
        budget.take(1, OnLoop())
    with pytest.raises(TooManyAddsInFlightError, match=r"does not wait.*or try later"):
        budget.take(1, OffLoop(), wait=False, instead="try later")
    assert (budget.entries, budget.waiting) == (1, 0)


def test_a_bounded_wait_ends_with_the_error():
    budget = AddBudget(1, 100, 0.05, "x")
    budget.take(1, OffLoop())
    with pytest.raises(TooManyAddsInFlightError, match=r"for 0\.05s"):
        budget.take(1, OffLoop())

    async def wait() -> None:
        await budget.take_async(1)

    with pytest.raises(TooManyAddsInFlightError, match=r"for 0\.05s"):
        asyncio.run(wait())
    assert (budget.entries, budget.waiting) == (1, 0)


def test_coroutines_get_room_in_the_order_they_asked():
    budget = AddBudget(2, 1000, None, "x")
    order: list[int] = []

    async def add(i: int, size: int) -> None:
        await budget.take_async(size)
        order.append(i)

    async def main() -> None:
        held = [1, 1]  # sizes in flight, oldest first
        for size in held:
            budget.take(size, OffLoop())
        tasks = [asyncio.ensure_future(add(i, 10 * i)) for i in range(4)]
        while budget.waiting < 4:
            await asyncio.sleep(0)
        for i in range(4):
            budget.release(1, held.pop(0))  # room for exactly one more
            held.append(10 * i)
            while len(order) <= i:
                await asyncio.sleep(0)
            assert budget.waiting == 3 - i
        await asyncio.gather(*tasks)

    asyncio.run(main())
    assert order == [0, 1, 2, 3]


def test_shutting_wakes_every_waiter_with_the_error():
    budget = AddBudget(1, 100, None, "x")
    budget.take(1, OffLoop())
    errors: list[BaseException] = []

    def blocked() -> None:
        try:
            budget.take(1, OffLoop())
        except BaseException as exc:
            errors.append(exc)

    async def awaiting() -> None:
        with pytest.raises(LedgerClosedError, match="client was closed"):
            await budget.take_async(1)

    thread = threading.Thread(target=blocked)
    thread.start()
    loop_done = threading.Event()
    loop_thread = threading.Thread(target=lambda: (asyncio.run(awaiting()), loop_done.set()))
    loop_thread.start()
    wait_until(lambda: budget.waiting == 2)
    budget.shut(LedgerClosedError("ledger 1: the client was closed"))
    thread.join(30)
    loop_thread.join(30)
    assert loop_done.is_set()
    assert [type(e) for e in errors] == [LedgerClosedError]
    with pytest.raises(LedgerClosedError):
        budget.take(0, OffLoop())


@pytest.mark.parametrize(
    ("data", "ok"),
    [
        (b"x" * 8, True),
        (bytearray(8), True),
        (memoryview(b"x" * 8), True),
        (b"x" * 9, False),
        (memoryview(b"x" * 12).cast("I"), False),  # 3 items, 12 bytes
    ],
)
def test_entry_bytes(data, ok):
    if ok:
        assert entry_bytes(data, 8, "ledger 1") == bytes(data)
    else:
        with pytest.raises(EntryTooLargeError, match="ledger 1: an entry of"):
            entry_bytes(data, 8, "ledger 1")


def test_entry_bytes_names_a_wrong_type():
    with pytest.raises(TypeError, match="entry data must be bytes, not str"):
        entry_bytes("text", 8, "ledger 1")
