"""The simulated metadata store: fates, ConnectionLoss before and after the write, sessions."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from embedlog.errors import MetadataError
from embedlog.metadata.client import MetadataClient
from embedlog.metadata.memory import MemoryMetadataStore
from embedlog.testing.simmeta import (
    APPLIED,
    LOST,
    OK,
    FaultyMetadataStore,
    MetadataFaults,
    MetaProfile,
    fate,
)


@pytest.mark.parametrize(
    ("error", "applied", "write", "expected"),
    [
        (0.0, 1.0, True, OK),  # a reliable store
        (1.0, 1.0, True, APPLIED),  # the server applied it, the answer was lost
        (1.0, 0.0, True, LOST),  # lost on the way there: nothing happened
        (1.0, 1.0, False, LOST),  # a read applies nothing
    ],
)
def test_an_operations_fate(error, applied, write, expected):
    profile = MetaProfile(error=error, applied=applied)
    assert fate(random.Random(1), profile, write=write) == expected


def faulty(error: float, applied: float, budget: int | None = None):
    inner = MemoryMetadataStore()
    counts: Counter[str] = Counter()
    faults = MetadataFaults(
        random.Random(0), MetaProfile(error=error, applied=applied), lambda *e: None, counts, budget
    )
    return inner, FaultyMetadataStore(inner, faults), counts


def test_a_compare_and_swap_applied_then_lost_happened_though_the_caller_saw_an_error():
    inner, store, counts = faulty(error=1.0, applied=1.0)
    inner.create("/n", b"a")
    with pytest.raises(MetadataError, match=r"ConnectionLoss.*after it was applied"):
        store.set("/n", b"b", 0)
    assert inner.get("/n") == (b"b", 1)
    assert counts["fault.meta_applied_error"] == 1


def test_an_operation_lost_before_it_applied_changed_nothing():
    inner, store, counts = faulty(error=1.0, applied=0.0)
    inner.create("/n", b"a")
    with pytest.raises(MetadataError, match="before it was applied"):
        store.set("/n", b"b", 0)
    with pytest.raises(MetadataError):
        store.get("/n")
    assert inner.get("/n") == (b"a", 0)
    assert counts["fault.meta_error"] == 2


def test_the_fault_budget_bounds_the_injected_faults():
    inner, store, counts = faulty(error=1.0, applied=0.0, budget=2)
    inner.create("/n", b"a")
    for _ in range(2):
        with pytest.raises(MetadataError):
            store.get("/n")
    assert store.get("/n") == (b"a", 0)  # the budget is spent: no more faults
    assert counts["fault.meta_error"] == 2


def test_a_sessions_end_is_the_servers_doing_and_never_fails():
    inner, store, _counts = faulty(error=0.0, applied=0.0)
    session = store.session()
    MetadataClient(store).register_bookie(session, "b1", {}, readonly=False)
    assert inner.children("/bookies/available") == ["b1"]
    store.faults.profile = MetaProfile(error=1.0)  # every client operation fails now
    session.expire()  # type: ignore[attr-defined]
    assert inner.children("/bookies/available") == []
