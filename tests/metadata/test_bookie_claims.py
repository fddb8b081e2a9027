"""Bookie id claims: clusters that share one metadata store never choose the same id."""

from __future__ import annotations

import threading

from embedlog.metadata.client import MetadataClient
from embedlog.metadata.store import MetadataStore


def test_a_claim_is_its_owners_alone(store: MetadataStore) -> None:
    mc = MetadataClient(store)
    assert mc.claim_bookie_id("bookie-1", "hostA:/data/one") is None
    assert mc.claim_bookie_id("bookie-1", "hostA:/data/one") is None  # idempotent
    assert mc.claim_bookie_id("bookie-1", "hostB:/data/two") == "hostA:/data/one"
    assert mc.bookie_id_taken("bookie-1", "hostB:/data/two") == "hostA:/data/one"
    assert mc.bookie_id_taken("bookie-1", "hostA:/data/one") is None
    assert mc.bookie_id_taken("bookie-2", "hostB:/data/two") is None


def test_a_cookie_without_a_claim_holds_its_id(store: MetadataStore) -> None:
    """A bookie registered before claims existed keeps its id from newcomers."""
    mc = MetadataClient(store)
    mc.write_cookie("bookie-3", b"{}", None)
    holder = mc.bookie_id_taken("bookie-3", "hostB:/data/two")
    assert holder is not None and "/cookies/bookie-3" in holder


def test_racing_claims_have_one_winner(store: MetadataStore) -> None:
    mc = MetadataClient(store)
    results: dict[str, str | None] = {}
    start = threading.Barrier(8)

    def claim(owner: str) -> None:
        start.wait()
        results[owner] = mc.claim_bookie_id("bookie-7", owner)

    threads = [threading.Thread(target=claim, args=(f"host{i}:/d",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [o for o, holder in results.items() if holder is None]
    assert len(winners) == 1
    assert all(holder == winners[0] for o, holder in results.items() if o != winners[0])
