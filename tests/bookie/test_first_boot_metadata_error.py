"""A first boot cut short by a metadata error boots the next time (found by the simulator).

The first boot writes the bookie's cookie to its disks, then to the metadata store, then
creates the index. A ZooKeeper ConnectionLoss on the metadata cookie (before or after
the server applied it) used to leave a bookie that never booted again without an
operator: "the metadata store has no cookie ... but its disks have data" (CookieError),
or "the index ... is damaged" (its cookie said an index existed). Such a bookie never
served, so its next boot starts over; a bookie whose disks were wiped still does not.
"""

from __future__ import annotations

import asyncio
import shutil

import pytest

from embedlog.bookie.bookie import Bookie, BookieState
from embedlog.bookie.config import BookieConfig
from embedlog.errors import CookieError, MetadataError
from embedlog.metadata.client import MetadataClient
from embedlog.metadata.memory import MemoryMetadataStore


class LosesOneCookieWrite(MemoryMetadataStore):
    """A store whose first create of a cookie fails as ZooKeeper's ConnectionLoss does:
    ``applied`` says whether the server had applied it."""

    def __init__(self, applied: bool) -> None:
        super().__init__()
        self.applied = applied
        self.failed = False

    def create(self, path: str, data: bytes, *, ephemeral: bool = False) -> int:
        if path.startswith("/cookies/") and not self.failed:
            self.failed = True
            if self.applied:
                super().create(path, data, ephemeral=ephemeral)
            raise MetadataError(f"ZooKeeper ConnectionLoss on {path}")
        return super().create(path, data, ephemeral=ephemeral)


def boot(store: MemoryMetadataStore, cfg: BookieConfig) -> Bookie:
    bookie = Bookie(cfg, MetadataClient(store), store.session())
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(bookie.start())
    finally:
        loop.run_until_complete(bookie.stop())
        loop.close()
    return bookie


@pytest.mark.parametrize("applied", [False, True], ids=["lost", "applied"])
def test_a_first_boot_cut_short_by_a_metadata_error_boots_next_time(tmp_path, applied):
    store = LosesOneCookieWrite(applied)
    cfg = BookieConfig.from_settings("b1", tmp_path / "b1")
    with pytest.raises(MetadataError):
        boot(store, cfg)
    assert store.failed
    again = boot(store, cfg)
    assert again.state is BookieState.STOPPED  # it served, then stopped cleanly
    assert again.cookie_problem is None and not again.unclean_shutdown_detected
    assert MetadataClient(store).read_cookie("b1") is not None
    boot(store, cfg)  # and every boot after


def test_a_bookie_whose_disks_were_wiped_after_serving_still_refuses(tmp_path):
    # What the rule above must not let through: every disk emptied, the metadata
    # store's cookie in place (the bookie may have acknowledged entries).
    store = MemoryMetadataStore()
    cfg = BookieConfig.from_settings("b1", tmp_path / "b1")
    boot(store, cfg)
    for d in (cfg.journal_dir, cfg.ledger_dir, cfg.index_dir):
        shutil.rmtree(d)
        d.mkdir()
    with pytest.raises(CookieError, match="no cookie"):
        boot(store, cfg)


def test_a_bookie_whose_index_disk_was_wiped_still_refuses(tmp_path):
    store = MemoryMetadataStore()
    cfg = BookieConfig.from_settings("b1", tmp_path / "b1")
    boot(store, cfg)
    shutil.rmtree(cfg.index_dir)
    cfg.index_dir.mkdir()
    with pytest.raises(CookieError, match="no cookie"):
        boot(store, cfg)
