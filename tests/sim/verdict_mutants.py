"""A test-only mutant of the bookie's boot whose own verdict excuses the data it loses:
a boot that takes the tombstones in its index (tombstones.py) for the leftovers of a
damaged journal drops them and says so, reporting journal damage (so BP-46 phase one
runs), though nothing happened to its disks (the journal is on, no fault). Its old
writer's late add then brings a deleted ledger back. An oracle that let the bookie's
verdict decide whether it lost data would forgive it; one that reads the history's
faults must not. Context managers patching this process: the mutant, and an oracle
that trusts the bookie's verdict (the rule the history replaced)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from seed_search import patched

from embedlog.bookie import boot
from embedlog.bookie.bookie import Bookie
from embedlog.bookie.config import BookieConfig
from embedlog.bookie.disk import Disk
from embedlog.bookie.index import tombstone_key
from embedlog.bookie.storage import LedgerStorage
from embedlog.testing.simbookies import SimBookies
from embedlog.testing.simlosses import LossRecord


@contextmanager
def damage_verdict_drops_tombstones() -> Iterator[None]:
    replay = boot._replay

    def mutant(
        cfg: BookieConfig, disk: Disk, storage: LedgerStorage, checkpoint: int
    ) -> tuple[int, list[str]]:
        end, damage = replay(cfg, disk, storage, checkpoint)
        prefix = tombstone_key(0)[:1]
        graves = list(storage.index.db.scan(prefix, include_value=False))
        if graves:
            with storage.index.db.batch() as batch:
                for key in graves:
                    batch.delete(key)
            where = Path(cfg.journal_dir).name
            damage = [*damage, f"{where}: a record past the checkpoint does not parse"]
        return end, damage

    with patched(boot, "_replay", mutant):
        yield


@contextmanager
def oracle_trusting_the_verdict() -> Iterator[None]:
    """The oracle as it would be if it let the bookie's verdict decide: a boot the bookie
    found suspicious is judged as after a loss, whatever the history did to it."""
    settle, booted = SimBookies._settle, LossRecord.booted
    suspicious: dict[str, bool] = {}

    def trusting_settle(self: SimBookies, bid: str, bookie: Bookie) -> None:
        suspicious[bid] = bool(bookie.suspicion)
        settle(self, bid, bookie)

    def trusting_booted(self: LossRecord, bid: str) -> bool:
        return booted(self, bid) | suspicious.pop(bid, False)

    with (
        patched(SimBookies, "_settle", trusting_settle),
        patched(LossRecord, "booted", trusting_booted),
    ):
        yield
