"""The simulated bookies: each incarnation's boot, crash and clean stop.

A boot makes a real ``Bookie`` over the bookie's in-memory disks (simdisk.py: they
outlive its incarnations), with disk threads that run on the loop after a latency drawn
from the seed (simloop.py ``SimDisk``), first running the operator's BP-46 cookie fix
when the disk faults wiped it; a crash loses the disk work in flight and cuts the power;
a clean stop may fail its final flush. Each incarnation's repair and registration
counts are added up as it goes (``retire``). The Simulation (sim.py) holds one
``SimBookies`` and answers the ClusterControl protocol's bookie questions with it.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from embedlog.bookie.bookie import Bookie, BookieState
from embedlog.bookie.config import BookieConfig
from embedlog.bookie.fixcookie import fix_cookies
from embedlog.client import Client
from embedlog.clock import Clock
from embedlog.errors import BookieIOError, CookieError, MetadataError
from embedlog.metadata.client import MetadataClient
from embedlog.metadata.store import MetadataStore
from embedlog.repair_client import repair_clients
from embedlog.testing.simbudget import FaultBudget
from embedlog.testing.simdisk import MemoryDisk
from embedlog.testing.simfaults import DiskNemesis
from embedlog.testing.simloop import SimDisk, VirtualClockLoop, seeded
from embedlog.testing.simtrace import Trace


class SimBookies:
    def __init__(
        self,
        seed: int,
        loop: VirtualClockLoop,
        root: Path,
        meta: MetadataClient,
        clock: Clock,
        bookie_settings: dict[str, Any],
        disks: dict[str, MemoryDisk],
        disk_faults: DiskNemesis,
        budget: FaultBudget,
        trace: Trace,
        counts: Counter[str],
        violate: Callable[[str, str], None],
        make_client: Callable[[str], Client],
    ) -> None:
        self.seed = seed
        self.loop = loop
        self.root = root
        self.meta = meta
        self.clock = clock
        self.bookie_settings = bookie_settings
        self.disks = disks  # each bookie's, for the whole history (shared with the faults)
        self.disk_faults = disk_faults
        self.budget = budget
        self.trace = trace
        self.counts = counts
        self.violate = violate  # the oracle's: a bookie that cannot boot for no fault
        self.make_client = make_client  # a client of the simulation, for BP-46 repair
        self._disk_rng = seeded(seed, "disk")
        self.bookies: dict[str, Bookie] = {}  # each bookie's latest incarnation
        self.sessions: dict[str, MetadataStore] = {}
        self._settled: dict[str, Bookie] = {}  # the incarnation _settle last saw of each
        self.disk_threads: dict[str, list[SimDisk]] = {}
        # Each bookie's config, the same for every incarnation (settings drawn once a
        # seed): built once, not at each of a stream history's 20 to 60 boots.
        self._configs: dict[str, BookieConfig] = {}

    def serving(self, bookie_id: str) -> Bookie | None:
        b = self.bookies.get(bookie_id)
        if b is None or b.state is not BookieState.SERVING:
            return None
        self._settle(bookie_id, b)
        return b

    def _settle(self, bookie_id: str, bookie: Bookie) -> None:
        """Once per incarnation, as soon as it serves (before ``boot`` returns: a boot
        still publishes its status): the oracle learns whether the history may have cost
        it acknowledged entries, before it judges any answer of it (``DiskNemesis.booted``)."""
        if self._settled.get(bookie_id) is not bookie:
            self._settled[bookie_id] = bookie
            self.disk_faults.booted(bookie_id)

    def _disk_latency(self) -> float:
        rng = self._disk_rng
        return rng.uniform(0.0001, 0.002) if rng.random() < 0.9 else rng.uniform(0.005, 0.05)

    def _disk_fault(self, bid: str, what: str, detail: str) -> None:
        self.counts[f"fault.{what}"] += 1
        self.trace("disk-fault", bid, what, detail)

    async def boot(self, bid: str) -> bool:
        cfg = self._configs.get(bid)
        if cfg is None:
            cfg = BookieConfig.from_settings(bid, self.root / bid, **self.bookie_settings)
            self._configs[bid] = cfg
        mdisk = self.disks.get(bid)
        if mdisk is None:
            mdisk = self.disks[bid] = MemoryDisk(
                seeded(self.seed, "disk", bid),
                self.loop.time,
                functools.partial(self._disk_fault, bid),
            )
        if self.disk_faults.needs_cookie_fix(bid):
            # The operator's BP-46 cookie fix for a wiped bookie (embedlog bookie fixcookie).
            try:
                fixed = fix_cookies(cfg, self.meta, mdisk)
            except (MetadataError, CookieError) as exc:  # the operator runs it again later
                self.counts[f"fixcookie_failed.{type(exc).__name__}"] += 1
                self.trace("fixcookie-failed", bid, exc)
                return False
            self.disk_faults.cookie_fixed(bid)
            self.trace("fixcookie", bid, len(fixed))
        session = self.meta.store.session()
        disks: list[SimDisk] = []

        def disk(name: str) -> SimDisk:
            d = SimDisk(self.loop, name, self._disk_latency, self._disk_ran)
            disks.append(d)
            return d

        bookie = Bookie(
            cfg,
            self.meta,
            session,
            client_factory=repair_clients(lambda: self.make_client(f"{bid}-repair")),
            disk_executor=disk,
            disk=mdisk,
            clock=self.clock,
        )
        self.bookies[bid], self.sessions[bid], self.disk_threads[bid] = bookie, session, disks
        bitten = mdisk.bitten
        self.disk_faults.boot_begins(bid)
        try:
            await bookie.start()
        except Exception as exc:
            session.close()
            if bookie.phase_one_done:  # protected, though the boot failed after (registering)
                self.counts["bp46.phase_one"] += 1
            self.trace("boot-failed", bid, type(exc).__name__, exc)
            if mdisk.bitten != bitten:  # a full or failing disk: it stays down for now
                self.counts["boot.failed_on_disk_fault"] += 1
                self.disk_faults.happened(bid, "boot-failed-on-disk")
                return False
            if isinstance(exc, MetadataError):
                # As against ZooKeeper: the boot gives up, the bookie is started again.
                self.counts["bookie.boot_failed.metadata"] += 1
                if bookie.left_unclean and not self.bookie_settings["journal_write_data"]:
                    # It could not clear the unclean bit it set: its next boot protects its
                    # ledgers (limbo) as after a crash, though it lost nothing. For liveness
                    # it counts as lossy.
                    self.budget.boot_aborted(bid)
                return False
            self.violate("BookieBoots", f"{bid} could not boot: {exc!r}")
            return False
        self.counts["bookie.boot"] += 1
        self._settle(bid, bookie)
        if bookie.phase_one_done:
            self.counts["bp46.phase_one"] += 1
        self.trace("booted", bid, bookie.suspicion or "clean", bookie.protected_ledgers)
        return True

    def _disk_ran(self, what: str) -> None:
        self.trace("disk", what)

    def retire(self, bid: str) -> None:
        """Count what this incarnation of the bookie did before it goes."""
        bookie = self.bookies[bid]
        progress = bookie.repairer.progress
        if progress.state == "done":
            self.counts["bp46.repair_done"] += 1
        self.counts["bp46.entries_copied"] += progress.entries_copied
        self.counts["bookie.registered_again"] += bookie.registration.renewals

    def crash(self, bid: str) -> None:
        self.serving(bid)  # settled first: the crash is its next boot's to answer for
        self.retire(bid)
        lost = sum(d.lose_pending() for d in self.disk_threads[bid])
        self.bookies[bid].crash()
        self.disks[bid].power_cut()
        self.disk_faults.happened(bid, "crash")
        if not self.bookie_settings["journal_write_data"]:
            self.budget.lost_data(bid)
        self.sessions.pop(bid).expire()  # type: ignore[attr-defined]
        self.counts["fault.crash"] += 1
        self.trace("crash", bid, "disk-ops-lost", lost)

    async def stop(self, bid: str) -> None:
        self.serving(bid)  # settled first, as before a crash
        self.retire(bid)
        self.counts["fault.clean_stop"] += 1
        self.trace("stop", bid)
        try:
            await self.bookies[bid].stop()
        except BookieIOError as exc:  # its final flush failed (a full or failing disk)
            self.counts["stop.unclean"] += 1
            self.trace("stop-unclean", bid, exc)
            self.disk_faults.happened(bid, "unclean-stop")
        finally:
            self.sessions.pop(bid).close()

    def down(self) -> list[str]:
        return [b for b in sorted(self.bookies) if self.serving(b) is None]

    def up(self) -> list[str]:
        return [b for b in sorted(self.bookies) if self.serving(b) is not None]
