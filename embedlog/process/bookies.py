"""The bookies of a ``LocalCluster(..., processes=True)``: each an OS process of its own
(``embedlog bookie run``), reached over TCP.

``ProcessBookies`` is to bookie processes what ``InProcessBookies``
(embedlog/cluster_bookies.py) is to bookie objects: a mixin that boots, stops, crashes,
pauses and wipes the cluster's bookies. ``embedlog/cluster.py`` composes it with
``LocalCluster`` into ``ProcessCluster``, the class ``LocalCluster(processes=True)``
makes; this package never imports the cluster.

The bookies share their metadata through ZooKeeper: ``metadata_uri`` names one, or,
left out, the cluster starts one for itself under ``data_dir/zookeeper`` (on a port
kept there, so the metadata comes back with the data) and stops it with the cluster.
The embedded store cannot serve: it is a LevelDB that one process at a time can open.

What maps onto signals: ``crash_bookie`` is SIGKILL (the cluster then ends the dead
bookie's ZooKeeper session, as ZooKeeper would once it timed out), ``pause_bookie``
SIGSTOP, ``resume_bookie`` SIGCONT; ``stop_bookie`` SIGTERM, the clean shutdown.
Network faults act in this process's clients as over TCP; those that would have to act
inside a bookie process (its repair client, its metadata calls) raise, naming the
in-process cluster that has them.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from embedlog.bookie.bookie import Bookie
from embedlog.bookie.config import BookieConfig
from embedlog.cluster_bookies import InProcessBookies, repair_client_name
from embedlog.metadata.store import MetadataStore
from embedlog.transport.faults import NetworkFaults

if TYPE_CHECKING:
    from embedlog.process.supervisor import BookieProcess

log = logging.getLogger(__name__)

ZOOKEEPER_CHROOT = "/embedlog"
_NOT_PASSED = ("bookie_id", "data_dir", "address")  # the command's flags say these


class ProcessNetworkFaults(NetworkFaults):
    """The faults a cluster of bookie processes can inject: between this process's clients
    and the bookies. Not the metadata delay, and nothing from a bookie's repair client:
    those would act inside the bookie processes."""

    def __init__(self, bookie_ids: Any) -> None:
        super().__init__()
        self._bookie_ids = bookie_ids

    def _check_source(self, src: str) -> None:
        for bid in self._bookie_ids():
            if src == repair_client_name(bid):
                raise ValueError(
                    f"{src} is bookie {bid}'s repair client, which runs inside its process "
                    "with processes=True: faults on it need the bookies in this process "
                    "(LocalCluster(..., processes=False), transport 'inprocess' or 'tcp')"
                )

    def block(self, src: str, dst: str) -> None:
        self._check_source(src)
        super().block(src, dst)

    def delay(self, src: str, dst: str, seconds: float) -> None:
        self._check_source(src)
        super().delay(src, dst, seconds)

    def drop_next(self, src: str, dst: str, op: str, count: int = 1) -> None:
        self._check_source(src)
        super().drop_next(src, dst, op, count)

    def delay_metadata(self, seconds: float) -> None:
        if seconds:
            raise ValueError(
                "delay_metadata slows the metadata calls of the bookies too, and with "
                "processes=True they make them in their own processes: use "
                "LocalCluster(..., processes=False) (transport 'inprocess' or 'tcp') for a "
                "slow-ZooKeeper test"
            )
        super().delay_metadata(seconds)


class _ClusterParts(InProcessBookies):
    """What ``ProcessBookies`` uses of ``LocalCluster``, declared for the type checker as
    ``InProcessBookies`` declares the cluster's state: LocalCluster is the next class in
    a ProcessCluster's method order, where ``super()`` goes."""

    network: NetworkFaults
    metadata_uri: str | None
    metadata_timeout: float
    data_dir: Path | None
    _own_dir: bool

    if TYPE_CHECKING:

        def __init__(self, *args: Any, **kwargs: Any) -> None: ...

        def _open_store(self) -> MetadataStore: ...

        def stop(self) -> None: ...


class ProcessBookies(_ClusterParts):
    """Bookie control for bookies that are processes of their own (a mixin of
    ``ProcessCluster``, embedlog/cluster.py)."""

    def __init__(self, *args: Any, processes: bool = True, **kwargs: Any) -> None:
        transport = kwargs.pop("transport", "tcp")
        if transport != "tcp":
            raise ValueError(
                f"processes=True reaches its bookies over TCP: transport={transport!r} cannot "
                "be; leave transport out (or use processes=False for in-process bookies)"
            )
        uri = kwargs.get("metadata_uri")
        if uri is not None and not (isinstance(uri, str) and uri.startswith("zk://")):
            raise ValueError(
                f"processes=True: metadata_uri={uri!r} cannot be shared by bookie processes; "
                "give a zk://host:port/path URI, or leave it out and the cluster starts a "
                "ZooKeeper of its own under data_dir"
            )
        super().__init__(*args, transport="tcp", processes=True, **kwargs)
        self.network = ProcessNetworkFaults(lambda: list(self._known))
        self._procs: dict[str, BookieProcess] = {}
        self._zk: Any = None  # the ZooKeeper this cluster started, if it did
        self._own_zookeeper = uri is None

    # -- metadata --------------------------------------------------------------------------

    def _open_store(self) -> MetadataStore:
        if self._own_zookeeper:
            self.metadata_uri = self._start_zookeeper()
        return super()._open_store()

    def _start_zookeeper(self) -> str:
        from embedlog.metadata import zkserver
        from embedlog.transport.tcp import stable_address

        assert self.data_dir is not None
        try:
            zkserver.find_classpath()
            zkserver.find_java()
        except zkserver.ZooKeeperNotInstalled as exc:
            raise RuntimeError(
                f"LocalCluster(processes=True) shares its metadata through ZooKeeper: {exc}; "
                "or pass metadata_uri='zk://host:port/path' of a running one"
            ) from None
        zk_dir = self.data_dir / "zookeeper"
        # A port kept under data_dir: the metadata (and the cookies in it) is the same when
        # the cluster starts again on this data_dir.
        port = int(stable_address(zk_dir).rpartition(":")[2])
        zk = zkserver.ZooKeeperServer(zk_dir, port=port)
        zk.start()
        self._zk = zk
        return zk.uri(ZOOKEEPER_CHROOT)

    # -- bookies ---------------------------------------------------------------------------

    def _boot_all(self, bookie_ids: list[str]) -> None:
        """Every bookie's process starts at once; then each is waited for."""
        launched = []
        for bid in bookie_ids:
            try:
                launched.append((bid, self._launch(bid)))
            except Exception as exc:
                self._failed[bid] = exc
                log.warning("bookie %s could not boot; the cluster starts without it: %s", bid, exc)
        for bid, proc in launched:
            try:
                self._wait_ready(bid, proc)
            except Exception as exc:
                log.warning("bookie %s could not boot; the cluster starts without it: %s", bid, exc)

    def start_bookie(self, bookie_id: str, **settings: Any) -> None:
        with self._lock:
            self._wait_ready(bookie_id, self._launch(bookie_id, **settings))

    def _launch(self, bookie_id: str, **settings: Any) -> BookieProcess:
        self._require_known(bookie_id)
        current = self._procs.get(bookie_id)
        if current is not None and current.running:
            raise RuntimeError(f"bookie {bookie_id} is already running")
        try:
            self._claim(bookie_id)
            config = self.bookie_config(bookie_id, **settings)
        except Exception as exc:
            self._failed[bookie_id] = exc
            raise
        # Here, not at the top: every LocalCluster imports this module, and the supervisor
        # brings the TCP transport and the config-file writer only processes=True needs.
        from embedlog.process.supervisor import BookieProcess

        assert self.metadata_uri is not None
        proc = BookieProcess(
            bookie_id,
            config.data_dir,
            self.metadata_uri,
            config.address,
            dict(_settings_of(config), metadata_timeout=self.metadata_timeout),
        )
        self._procs[bookie_id] = proc
        proc.launch()
        return proc

    def _wait_ready(self, bookie_id: str, proc: BookieProcess) -> None:
        try:
            proc.wait_ready()
        except Exception as exc:
            self._failed[bookie_id] = exc
            raise
        self._failed.pop(bookie_id, None)
        self.transport.serving_elsewhere(bookie_id, proc.address)  # type: ignore[attr-defined]

    def _running_process(self, bookie_id: str) -> BookieProcess:
        self._require_known(bookie_id)
        proc = self._procs.get(bookie_id)
        if proc is None or not proc.running:
            raise RuntimeError(f"bookie {bookie_id} is not running")
        return proc

    def stop_bookie(self, bookie_id: str) -> None:
        """SIGTERM: the bookie syncs, flushes, leaves ZooKeeper and exits."""
        with self._lock:
            self._running_process(bookie_id).stop()

    def crash_bookie(self, bookie_id: str) -> None:
        """SIGKILL; then its ZooKeeper session is ended, as ZooKeeper ends a dead one."""
        with self._lock:
            proc = self._running_process(bookie_id)
            proc.kill()
            self._expire(proc)

    def _expire(self, proc: BookieProcess) -> None:
        session = proc.current_session()
        if session is None or self.metadata_uri is None:
            return
        from embedlog.metadata.uri import parse_zk_uri
        from embedlog.metadata.zookeeper_store import expire_session

        expire_session(parse_zk_uri(self.metadata_uri)[0], session)
        proc.session = None

    def pause_bookie(self, bookie_id: str) -> None:
        """SIGSTOP: the bookie answers nothing and loses nothing until ``resume_bookie``.
        Its connections stay open; requests wait in them. A pause longer than the
        ZooKeeper session timeout (10 s) expires its session, as it would in production: it
        is out of placement until it continues and registers again with a new session."""
        with self._lock:
            self._running_process(bookie_id).pause()

    def resume_bookie(self, bookie_id: str) -> None:
        """SIGCONT: the bookie serves what waited, in order."""
        with self._lock:
            self._running_process(bookie_id).resume()

    def paused_bookies(self) -> list[str]:
        return [b for b in self.running_bookies() if self._procs[b].paused]

    def running_bookies(self) -> list[str]:
        return [b for b in self._known if b in self._procs and self._procs[b].running]

    def bookie_pid(self, bookie_id: str) -> int:
        """The process id of a running bookie."""
        pid = self._running_process(bookie_id).pid
        assert pid is not None
        return pid

    def wipe_bookie(self, bookie_id: str, what: str = "all") -> None:
        proc = self._procs.get(bookie_id)
        if proc is not None and proc.running:
            raise RuntimeError(f"stop or crash bookie {bookie_id} before wiping its disks")
        super().wipe_bookie(bookie_id, what)

    def bookie(self, bookie_id: str) -> Bookie:
        raise RuntimeError(
            f"bookie {bookie_id} runs in a process of its own (processes=True): there is no "
            "bookie object here; use read_from_bookie, metadata.bookie_status or bookie_pid"
        )

    def metrics_snapshot(self) -> Any:
        raise RuntimeError(
            "metrics with processes=True: each bookie counts in its own process, and those "
            "counts are not collected here yet; use LocalCluster(..., processes=False) for "
            "metrics() (the clients' own metrics are client.ctx.metrics)"
        )

    def wait_repaired(self, bookie_id: str, timeout: float = 60.0) -> dict[str, Any]:
        """Until the bookie's BP-46 repair is done, as its published status says."""
        deadline = time.monotonic() + timeout
        while True:
            self._running_process(bookie_id)
            status = self.metadata.bookie_status(bookie_id) or {}
            repair = status.get("repair")
            repair_state = repair.get("state") if isinstance(repair, dict) else None
            if status.get("state") == "serving" and repair_state in ("idle", "done"):
                return status
            if time.monotonic() > deadline:
                raise TimeoutError(f"bookie {bookie_id} still repairing after {timeout}s: {repair}")
            time.sleep(0.05)

    # -- lifecycle -------------------------------------------------------------------------

    def stop(self) -> None:
        with self._lock:
            procs = [p for p in self._procs.values() if p.running]
            for p in procs:  # all at once: each flushes its own disks
                p.resume()
                if p.proc is not None:
                    p.proc.terminate()
            for p in procs:
                try:
                    p.stop()
                except Exception:
                    log.exception("stopping bookie %s", p.bookie_id)
            own, self._own_dir = self._own_dir, False
            try:
                super().stop()
            finally:
                zk, self._zk = self._zk, None
                if zk is not None:
                    zk.stop()
                self._own_dir = own
                if own and self.data_dir is not None:
                    shutil.rmtree(self.data_dir, ignore_errors=True)


def _settings_of(config: BookieConfig) -> dict[str, Any]:
    """A bookie's settings as its process's config file gives them."""
    out = {}
    for a in attrs.fields(BookieConfig):
        if a.name in _NOT_PASSED:
            continue
        value = getattr(config, a.name)
        if value is not None:
            out[a.name] = str(value) if isinstance(value, Path) else value
    return out
