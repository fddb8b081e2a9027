"""The boot as a function (embedlog/bookie/boot.py): what it returns about the disks it
found, and how a failed one leaves them, with no Bookie around it."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from embedlog.bookie.boot import BootEnv, BootFailed, BootReport, boot, final_flush
from embedlog.bookie.config import BookieConfig
from embedlog.bookie.cookie import COOKIE_FILE
from embedlog.bookie.disk import REAL_DISK
from embedlog.bookie.ledgers import LedgerTable
from embedlog.clock import SYSTEM_CLOCK
from embedlog.errors import MetadataError
from embedlog.metadata.client import MetadataClient
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.metadata.memory import MemoryMetadataStore
from embedlog.metrics import BookieMetrics

LEDGER = 7


def env(cfg: BookieConfig, meta: MetadataClient, *, metadata_down: bool = False) -> BootEnv:
    async def all_metadata() -> list[LedgerMetadata]:
        if metadata_down:
            raise MetadataError("ZooKeeper ConnectionLoss on /ledgers")
        return [meta.read_ledger(lid) for lid in meta.list_ledgers()]

    return BootEnv(
        config=cfg,
        metadata=meta,
        disk=REAL_DISK,
        journal_exec=ThreadPoolExecutor(1),
        flush_exec=ThreadPoolExecutor(1),
        metrics=BookieMetrics(),
        clock=SYSTEM_CLOCK,
        ledgers=LedgerTable(),
        all_metadata=all_metadata,
    )


def run_boot(boot_env: BootEnv, then: str) -> BootReport | BootFailed:
    """One boot; then a clean ``stop`` (the final flush) or a ``crash`` of what it opened."""

    async def main() -> BootReport | BootFailed:
        found = await boot(boot_env)
        if isinstance(found, BootReport):
            if then == "stop":
                await final_flush(found.storage, found.journal)
                await found.journal.close()
                found.storage.close()
            else:
                found.journal.crash()
                found.storage.crash()
        return found

    try:
        return asyncio.run(main())
    finally:
        boot_env.journal_exec.shutdown()
        boot_env.flush_exec.shutdown()


def cluster(tmp_path: Path, **settings: object) -> tuple[BookieConfig, MetadataClient]:
    meta = MetadataClient(MemoryMetadataStore())
    meta.create_ledger(
        LedgerMetadata(
            ledger_id=LEDGER,
            ensemble_size=3,
            write_quorum=2,
            ack_quorum=2,
            fragments=((0, ("b1", "b2", "b3")),),
        )
    )
    return BookieConfig.from_settings("b1", tmp_path / "b1", **settings), meta


def test_a_first_boot_finds_nothing_to_suspect(tmp_path: Path) -> None:
    cfg, meta = cluster(tmp_path)
    found = run_boot(env(cfg, meta), "stop")
    assert isinstance(found, BootReport)
    assert not found.unclean_shutdown_detected and found.suspicion == ()
    assert not found.phase_one_done and found.protected_ledgers == 0
    assert not found.repair_pending and found.cookie_problem is None
    found = run_boot(env(cfg, meta), "stop")  # after a clean stop: clean again
    assert isinstance(found, BootReport) and found.found_unclean is False


def test_a_boot_after_a_crash_without_the_journal_protects_and_says_so(tmp_path: Path) -> None:
    cfg, meta = cluster(tmp_path, journal_write_data=False)
    run_boot(env(cfg, meta), "crash")
    found = run_boot(env(cfg, meta), "stop")
    assert isinstance(found, BootReport)
    assert found.found_unclean and found.unclean_shutdown_detected
    assert "unclean shutdown while adds skipped the journal" in found.suspicion
    assert found.phase_one_done and found.protected_ledgers == 1 and found.repair_pending


def test_a_failed_boot_comes_back_as_a_value_with_its_disks_released(tmp_path: Path) -> None:
    cfg, meta = cluster(tmp_path, journal_write_data=False)
    run_boot(env(cfg, meta), "crash")
    failed = run_boot(env(cfg, meta, metadata_down=True), "stop")  # phase one cannot list
    assert isinstance(failed, BootFailed) and isinstance(failed.error, MetadataError)
    assert failed.found_unclean is True and failed.left_unclean  # the crash stays known
    found = run_boot(env(cfg, meta), "stop")  # the index and journal were released
    assert isinstance(found, BootReport) and found.phase_one_done


def test_a_failed_boot_after_a_clean_stop_leaves_it_clean(tmp_path: Path) -> None:
    cfg, meta = cluster(tmp_path, auto_fix_cookies=True)
    run_boot(env(cfg, meta), "stop")
    (cfg.journal_dir / COOKIE_FILE).unlink()  # a cookie problem: phase one must run
    failed = run_boot(env(cfg, meta, metadata_down=True), "stop")  # and cannot list
    assert isinstance(failed, BootFailed) and isinstance(failed.error, MetadataError)
    # It served nothing: the last shutdown stays clean, its own work flushed first.
    assert failed.found_unclean is False and not failed.left_unclean
    found = run_boot(env(cfg, meta), "stop")
    assert isinstance(found, BootReport) and not found.found_unclean
    assert found.phase_one_done and found.cookie_problem is not None
