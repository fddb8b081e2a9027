"""A boot that fails before serving leaves the last shutdown as it found it.

With the journal off, a boot that finds the unclean-shutdown bit set suspects a loss:
phase one fences its ledgers and puts them in limbo until repair copies them back. A
boot sets the bit as it starts. One that then failed (a ZooKeeper ConnectionLoss on its
registration) used to leave the bit set, so the next boot put every ledger in limbo
though nothing had been acknowledged, let alone lost; two such bookies of one write set
left a stream that no takeover could settle (found by the simulator: seed 9483 of
``unbounded-nojournal``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from embedlog.bookie.bookie import Bookie
from embedlog.bookie.config import BookieConfig
from embedlog.bookie.storage import LedgerStorage
from embedlog.errors import MetadataError
from embedlog.metadata.client import MetadataClient
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.metadata.memory import MemoryMetadataStore

LEDGER = 7


class LosesRegistrations(MemoryMetadataStore):
    """A store whose registrations fail (ConnectionLoss before it was applied) while
    ``failing`` is set."""

    failing = False

    def create(self, path: str, data: bytes, *, ephemeral: bool = False) -> int:
        if self.failing and path.startswith("/bookies/available/"):
            raise MetadataError(f"ZooKeeper ConnectionLoss on create {path}")
        return super().create(path, data, ephemeral=ephemeral)


def start(
    store: MemoryMetadataStore, cfg: BookieConfig
) -> tuple[Bookie, asyncio.AbstractEventLoop]:
    bookie = Bookie(cfg, MetadataClient(store), store.session())
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(bookie.start())
    except BaseException:
        loop.close()
        raise
    return bookie, loop


def stop(bookie: Bookie, loop: asyncio.AbstractEventLoop, *, crash: bool = False) -> None:
    try:
        if crash:
            bookie.crash()
            # Let the cancelled tasks end before the loop closes.
            pending = asyncio.all_tasks(loop)
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        else:
            loop.run_until_complete(bookie.stop())
    finally:
        loop.close()


@pytest.fixture
def cluster(tmp_path: Path) -> tuple[LosesRegistrations, BookieConfig]:
    store = LosesRegistrations()
    MetadataClient(store).create_ledger(
        LedgerMetadata(
            ledger_id=LEDGER,
            ensemble_size=3,
            write_quorum=2,
            ack_quorum=2,
            fragments=((0, ("b1", "b2", "b3")),),
        )
    )
    cfg = BookieConfig.from_settings("b1", tmp_path / "b1", journal_write_data=False)
    return store, cfg


def failed_boot(store: LosesRegistrations, cfg: BookieConfig) -> Bookie:
    store.failing = True
    bookie = Bookie(cfg, MetadataClient(store), store.session())
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(MetadataError, match="ConnectionLoss"):
            loop.run_until_complete(bookie.start())
    finally:
        loop.close()
        store.failing = False
    return bookie


def test_a_boot_that_failed_after_a_clean_stop_leaves_it_clean(cluster) -> None:
    store, cfg = cluster
    stop(*start(store, cfg))  # served, then stopped cleanly
    failed = failed_boot(store, cfg)
    bookie, loop = start(store, cfg)
    try:
        assert not bookie.unclean_shutdown_detected and bookie.suspicion == []
        assert bookie.protected_ledgers == 0
        info = bookie.storage.info(LEDGER) if bookie.storage is not None else None
        assert info is None or not info.limbo  # nothing in limbo: nothing was lost
    finally:
        stop(bookie, loop)
    assert failed.found_unclean is False and not failed.left_unclean


def test_a_boot_that_failed_after_a_crash_leaves_the_crash_for_the_next_boot(cluster) -> None:
    store, cfg = cluster
    stop(*start(store, cfg), crash=True)
    failed = failed_boot(store, cfg)
    assert failed.found_unclean is True and failed.left_unclean
    bookie, loop = start(store, cfg)
    try:
        assert bookie.unclean_shutdown_detected
        assert "unclean shutdown while adds skipped the journal" in bookie.suspicion
        assert bookie.protected_ledgers == 1
    finally:
        stop(bookie, loop)


def test_a_failed_boot_whose_last_flush_fails_leaves_the_bit_set(cluster, monkeypatch) -> None:
    store, cfg = cluster
    stop(*start(store, cfg))
    real = LedgerStorage.flush
    calls = {"n": 0}

    async def flush(self: LedgerStorage, *args: object) -> None:
        calls["n"] += 1
        if calls["n"] > 1:  # the boot's own flush passes; the failed boot's last one fails
            raise OSError(28, "No space left on device")
        await real(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(LedgerStorage, "flush", flush)
    failed = failed_boot(store, cfg)
    monkeypatch.setattr(LedgerStorage, "flush", real)
    assert failed.left_unclean
    bookie, loop = start(store, cfg)
    try:
        assert bookie.unclean_shutdown_detected and bookie.protected_ledgers == 1
    finally:
        stop(bookie, loop)
