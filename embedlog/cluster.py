"""LocalCluster: a whole BookKeeper-style cluster in this process, for applications and tests.

The bookies themselves (boot, pause, stop, crash, wipe) are in ``cluster_bookies.py``.
Bookies keep their data under ``data_dir/<bookie-id>/`` (journal/, ledgers/,
index/); the metadata store is embedded under ``data_dir/metadata`` unless a
``metadata_uri`` names another. Reopening a LocalCluster on the same
``data_dir`` brings the same bookies back with their data.
"""

from __future__ import annotations

import logging
import re
import shutil
import socket
import ssl
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embedlog.bookie.bookie import Bookie, BookieState
from embedlog.bookie.config import BookieConfig
from embedlog.client import Client
from embedlog.cluster_bookies import InProcessBookies, server_ssl
from embedlog.errors import ClientClosedError, CookieError, error_for_status
from embedlog.metadata.client import MetadataClient
from embedlog.metadata.store import MetadataStore
from embedlog.metadata.uri import DEFAULT_METADATA_TIMEOUT, open_store
from embedlog.metrics import BookieMetrics, MetricsSnapshot, flatten, sum_bookies, sum_clients
from embedlog.process.bookies import ProcessBookies
from embedlog.runtime import Runtime
from embedlog.transport.base import Transport, next_txn
from embedlog.transport.faults import NetworkFaults
from embedlog.transport.inprocess import InProcessTransport
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import HEADER, Digester, header_fields
from embedlog.wire.messages import OpCode, Request
from embedlog.wire.record import split_record

if TYPE_CHECKING:
    from embedlog.auditor.checker import Report
    from embedlog.transport.tcp import TcpTransport

log = logging.getLogger(__name__)

_BOOKIE_DIR = re.compile(r"^bookie-(\d+)$")
TLS_SETTINGS = ("tls_cert", "tls_key", "tls_ca", "tls_require_client_cert")
ADMIN = "admin"  # the client name of LocalCluster's own requests (read_from_bookie)
STOPPED = (
    "the cluster is stopped (LocalCluster.stop()): its clients and their ledger handles take "
    "no more calls; start() it again and make new clients"
)


class LocalCluster(InProcessBookies):
    def __new__(cls, *args: Any, processes: bool = False, **kwargs: Any) -> LocalCluster:
        # processes=True: the same API with each bookie in a process of its own.
        if processes and cls is LocalCluster:
            return super().__new__(ProcessCluster)
        return super().__new__(cls)

    def __init__(
        self,
        num_bookies: int = 3,
        data_dir: str | Path | None = None,
        *,
        transport: str = "inprocess",
        tls: bool = False,
        metadata_uri: str | None = None,
        metadata_timeout: float = DEFAULT_METADATA_TIMEOUT,
        journal_write_data: bool = True,
        processes: bool = False,
        **bookie_config: Any,
    ) -> None:
        # processes=True made this a ProcessCluster (__new__), which passes it on as True.
        self.processes = processes
        if not isinstance(num_bookies, int) or num_bookies < 0:
            raise ValueError(f"num_bookies must be a whole number >= 0, got {num_bookies!r}")
        if transport not in ("inprocess", "tcp"):
            raise ValueError(f"transport must be 'inprocess' or 'tcp', got {transport!r}")
        if tls and transport != "tcp":
            raise ValueError("tls=True needs transport='tcp'")
        given_tls = sorted(k for k in TLS_SETTINGS if bookie_config.get(k))
        if given_tls and transport != "tcp":
            raise ValueError(f"{', '.join(given_tls)} need(s) transport='tcp'")
        self._settings: dict[str, Any] = dict(bookie_config, journal_write_data=journal_write_data)
        # Validate settings now, not at the first boot: a typo should fail right here.
        probe = BookieConfig.from_settings("probe", Path("."), **self._settings)
        if probe.tls:
            self._check_tls_files(probe)
        self.num_bookies = num_bookies
        self.transport_kind = transport
        # tls=True alone: the self-signed certificate under data_dir/tls (a sandbox's).
        self.tls = tls or probe.tls
        self._self_signed: dict[str, Path] = {}  # its tls_cert and tls_key, once made
        self._client_transports: list[TcpTransport] = []  # of clients with TLS of their own
        self.metadata_uri = metadata_uri
        if (
            isinstance(metadata_timeout, bool)
            or not isinstance(metadata_timeout, int | float)
            or not metadata_timeout > 0
        ):
            raise ValueError(
                f"metadata_timeout must be a number of seconds > 0, got {metadata_timeout!r}"
            )
        self.metadata_timeout = float(metadata_timeout)  # how long ZooKeeper may keep us waiting
        self._data_dir_arg = Path(data_dir) if data_dir is not None else None
        self.data_dir: Path | None = None
        self._own_dir = False
        self._lock = threading.RLock()
        self._bookies: dict[str, Bookie] = {}
        self._sessions: dict[str, MetadataStore] = {}
        self._known: list[str] = []
        self._clients: list[Client] = []
        self._failed: dict[str, Exception] = {}
        # Every bookie object's metrics, also of those stopped or crashed since: the
        # cluster's counters never go backwards when a bookie restarts.
        self._bookie_metrics: list[BookieMetrics] = []
        self._last_check: Report | None = None  # the last check_metadata() run
        self._checks = 0
        self.network = NetworkFaults()
        self._runtime: Runtime | None = None
        self._store: MetadataStore | None = None
        self._meta: MetadataClient | None = None
        self._transport: Transport | None = None
        self._repair_request_timeout = 5.0
        self._stopped = False

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> LocalCluster:
        """Open the metadata store and boot every bookie.

        A bookie that cannot boot does not keep the others down: the others start, a
        warning names it and why, and ``failed_bookies`` holds its error (start it again
        with ``start_bookie`` once fixed). Only when bookies were to boot and none could
        does start() raise (that bookie's error, the others' in a note): such a cluster
        can do nothing.
        """
        if self._runtime is not None:
            return self
        if self._data_dir_arg is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="embedlog-"))
            self._own_dir = True
        else:
            self.data_dir = self._data_dir_arg
            self.data_dir.mkdir(parents=True, exist_ok=True)
        self._runtime = Runtime("embedlog-cluster")
        try:
            self._store = self._open_store()
            self._meta = MetadataClient(self._store, delay=lambda: self.network.metadata_delay)
            self._transport = self._make_transport()
            existing = sorted(
                (p.name for p in self.data_dir.iterdir() if _BOOKIE_DIR.match(p.name)),
                key=lambda n: int(n.split("-")[1]),
            )
            self._known = list(existing)
            self._failed.clear()
            while len(self._known) < self.num_bookies:
                self._known.append(self._new_bookie_id())
            self._boot_all(list(self._known))
            if self._failed and not self.running_bookies():
                first = next(iter(self._failed.values()))
                for bid, exc in self._failed.items():
                    first.add_note(f"bookie {bid} could not boot: {exc}")
                raise first
        except BaseException:
            self.stop()
            raise
        return self

    def _open_store(self) -> MetadataStore:
        assert self.data_dir is not None
        return open_store(self.metadata_uri, self.data_dir, metadata_timeout=self.metadata_timeout)

    def _boot_all(self, bookie_ids: list[str]) -> None:
        for bid in bookie_ids:
            self._boot_or_report(bid)

    def _boot_or_report(self, bookie_id: str) -> None:
        try:
            self.start_bookie(bookie_id)
        except Exception as exc:  # start_bookie recorded it in failed_bookies
            log.warning(
                "bookie %s could not boot; the cluster starts without it: %s", bookie_id, exc
            )

    @property
    def failed_bookies(self) -> dict[str, Exception]:
        """Bookies whose last boot failed (bookie id -> why); empty when all are running."""
        return dict(self._failed)

    @staticmethod
    def _check_tls_files(config: BookieConfig) -> None:
        """The operator's TLS files, checked before any bookie boots."""
        from embedlog.transport import tls

        assert config.tls_cert is not None and config.tls_key is not None
        server_ssl(config)
        if config.tls_ca is not None:
            # The cluster's own clients (repair, read_from_bookie, client()) present the
            # bookies' certificate to bookies that verify clients.
            tls.check_identity(config.tls_cert, config.tls_key, role="client")

    def _make_transport(self) -> Transport:
        if self.transport_kind == "tcp":
            from embedlog.transport import tls
            from embedlog.transport.tcp import TcpCluster

            assert self.data_dir is not None
            client_ssl: ssl.SSLContext | None = None
            ca: Path | None = None
            self._self_signed = {}
            if self.tls and self._settings.get("tls_cert") is None:
                # One self-signed certificate for the whole cluster, kept under data_dir so
                # other processes can trust it (embedlog.connect(..., tls_ca=...)).
                cert, key = tls.ensure_self_signed(self.data_dir / "tls")
                self._self_signed = {"tls_cert": cert, "tls_key": key}
                ca, client_ssl = cert, tls.client_context(cert)
            elif self.tls:
                config = self._config_of(self._settings)
                ca = config.tls_ca
                verifies = config.tls_ca is not None  # the bookies ask for client certificates
                client_ssl = tls.client_context(
                    ca, config.tls_cert if verifies else None, config.tls_key if verifies else None
                )
            # A server per bookie starts/stops through the bookie_started/bookie_stopped hooks.
            return TcpCluster(
                lambda bid: self.bookie_config(bid).address,
                lambda coro: self.runtime.run(coro),
                self.network,
                client_ssl=client_ssl,
                tls_ca=ca,
            )
        return InProcessTransport(self._serving, self.network)

    @staticmethod
    def _config_of(settings: dict[str, Any]) -> BookieConfig:
        return BookieConfig.from_settings("cluster", Path("."), **settings)

    def _serving(self, bookie_id: str) -> Bookie | None:
        b = self._bookies.get(bookie_id)
        return b if b is not None and b.state is BookieState.SERVING else None

    def stop(self) -> None:
        with self._lock:
            for c in self._clients:
                try:
                    c.close()
                except Exception:
                    log.exception("closing client %s", c.name)
            self._clients.clear()
            rt = self._runtime
            transports, self._client_transports = self._client_transports, []
            if rt is not None:
                for t in transports:
                    try:
                        rt.run(t.close(), timeout=10)
                    except Exception:
                        log.exception("closing a client's transport")
                # Everything goes: the bookies' last status and unregistering must not wait
                # for an unreachable ZooKeeper (docs/operations.md, "ZooKeeper outages").
                for store in [self._store, *self._sessions.values()]:
                    if store is not None:
                        store.stop_waiting()
                for bid, b in list(self._bookies.items()):
                    if b.state in (BookieState.SERVING, BookieState.BOOTING):
                        try:
                            self._drop_held(b, "stopped")
                            rt.run(b.stop(), timeout=60)
                        except Exception:
                            log.exception("stopping bookie %s", bid)
                    self._end_session(bid, clean=True)
                if self._transport is not None:
                    try:
                        rt.run(self._transport.close(), timeout=10)
                    except Exception:
                        log.exception("closing transport")
                rt.close(STOPPED)
                self._stopped = True
            self._bookies.clear()
            if self._store is not None:
                self._store.close()
            self._runtime = self._store = self._meta = self._transport = None
            if self._own_dir and self.data_dir is not None:
                shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- accessors -----------------------------------------------------------------------------

    @property
    def runtime(self) -> Runtime:
        if self._runtime is None:
            if self._stopped:
                raise ClientClosedError(STOPPED)
            raise RuntimeError(
                "the cluster is not started: use `with LocalCluster(...)` or .start()"
            )
        return self._runtime

    @property
    def metadata(self) -> MetadataClient:
        self.runtime  # noqa: B018 - raises if not started
        assert self._meta is not None
        return self._meta

    @property
    def transport(self) -> Transport:
        self.runtime  # noqa: B018
        assert self._transport is not None
        return self._transport

    @property
    def bookie_ids(self) -> list[str]:
        return list(self._known)

    def bookie(self, bookie_id: str) -> Bookie:
        """The bookie object (the current incarnation) for ``bookie_id``."""
        try:
            return self._bookies[bookie_id]
        except KeyError:
            raise KeyError(f"unknown bookie {bookie_id!r}; bookies: {self._known}") from None

    def bookie_config(self, bookie_id: str, **overrides: Any) -> BookieConfig:
        assert self.data_dir is not None
        settings = dict(self._settings, **overrides)
        for name, path in self._self_signed.items():
            if settings.get(name) is None:
                settings[name] = path
        if self.transport_kind == "tcp" and not settings.get("address"):
            from embedlog.transport.tcp import stable_address

            # Chosen once, then kept in data_dir/<bookie-id>/address: the cookie records it.
            settings["address"] = stable_address(self.data_dir / bookie_id)
        return BookieConfig.from_settings(bookie_id, self.data_dir / bookie_id, **settings)

    def running_bookies(self) -> list[str]:
        return [b for b in self._known if self._serving(b) is not None]

    # -- bookie control ------------------------------------------------------------------------

    def add_bookie(self) -> str:
        with self._lock:
            bid = self._new_bookie_id()
            self._known.append(bid)
            self.start_bookie(bid)
            return bid

    def _new_bookie_id(self) -> str:
        """The lowest free ``bookie-N``: free here, and in the metadata store, which other
        clusters (processes, hosts) may share: the id is claimed there before it is used."""
        taken = {int(b.split("-")[1]) for b in self._known}
        assert self.data_dir is not None
        n = 0
        while True:
            n += 1
            bid = f"bookie-{n}"
            if n in taken or (self.data_dir / bid).exists():
                continue
            owner = self._owner(bid)
            meta = self.metadata
            free = meta.bookie_id_taken(bid, owner) is None
            if free and meta.claim_bookie_id(bid, owner) is None:
                return bid

    def _owner(self, bookie_id: str) -> str:
        """Who a claim on ``bookie_id`` names: this host and the bookie's directory."""
        assert self.data_dir is not None
        return f"{socket.gethostname()}:{(self.data_dir / bookie_id).resolve()}"

    def _claim(self, bookie_id: str) -> None:
        """Claim the id of a bookie whose directory is here (it is this cluster's)."""
        holder = self.metadata.claim_bookie_id(bookie_id, self._owner(bookie_id))
        if holder is not None:
            raise CookieError(
                f"bookie id {bookie_id} of {self.data_dir} is claimed in the metadata store by "
                f"{holder}: two clusters share one metadata store and their bookies' ids. "
                "Give each cluster a metadata_uri of its own (another zk:// path)"
            )

    # -- clients and inspection ----------------------------------------------------------------

    def client(
        self,
        name: str = "c1",
        request_timeout: float = 5.0,
        *,
        tls_ca: str | Path | None = None,
        tls_cert: str | Path | None = None,
        tls_key: str | Path | None = None,
        **options: Any,
    ) -> Client:
        """A client of this cluster, sharing its connections; with ``tls_ca``, ``tls_cert``
        or ``tls_key``, a client with TLS settings and connections of its own, as another
        process would have (``embedlog.connect``); they close when the cluster stops."""
        transport = self.transport
        if tls_ca is not None or tls_cert is not None or tls_key is not None:
            transport = self._tls_client_transport(tls_ca, tls_cert, tls_key)
        c = Client(
            self.runtime,
            self.metadata,
            transport,
            name=name,
            request_timeout=request_timeout,
            **options,
        )
        self._clients.append(c)
        return c

    def _tls_client_transport(
        self, ca: str | Path | None, cert: str | Path | None, key: str | Path | None
    ) -> Transport:
        from embedlog.transport import tls
        from embedlog.transport.tcp import TcpCluster, TcpTransport

        cluster = self.transport
        if not isinstance(cluster, TcpCluster):
            raise ValueError("tls_ca, tls_cert and tls_key need transport='tcp'")
        transport = TcpTransport(
            cluster.address, self.network, ssl_context=tls.client_context(ca, cert, key)
        )
        self._client_transports.append(transport)
        return transport

    def read_from_bookie(self, bookie_id: str, ledger_id: int, entry_id: int) -> bytes:
        """A plain read to one bookie: the payload it stores, else its answer as an error."""
        req = Request(OpCode.READ, next_txn(), ledger_id, entry_id)
        resp = self.runtime.run(self.transport.request(ADMIN, bookie_id, req, 10.0))
        if resp.status != StatusCode.EOK:
            raise error_for_status(resp.status, f"bookie {bookie_id}, entry {ledger_id}:{entry_id}")
        try:
            digest_len = Digester(self.metadata.read_ledger(ledger_id).digest_type).digest_len
        except Exception:
            digest_len = 0
        flags = header_fields(resp.body)[3]
        return split_record(flags, resp.body[HEADER.size + digest_len :])[2]

    def check_metadata(self) -> Report:
        """BP-34: check the placement and replication of every closed ledger, and of the sealed
        fragments (all but the last) of open ones, against the bookies."""
        from embedlog.auditor.checker import MetadataChecker

        report = MetadataChecker(self.metadata, self.transport, self.runtime).run()
        self._last_check = report
        self._checks += 1
        return report

    def metrics(self) -> dict[str, float]:
        """What operators watch, as plain numbers (docs/metrics.md lists each one).

        Counters (``adds``, ``bookie_entries_added``, ...) only grow, over bookie restarts
        too: a rate is the difference of two calls over the time between them. Histograms
        come as ``<name>_count``, ``_sum``, ``_p50`` and ``_p99`` (bucket upper bounds:
        embedlog/metrics.py). Gauges (``disk_bytes``, ``ledgers``, ``limbo_ledgers``,
        ``connections``, ``bookies_running``, ``bookies_readonly``) are read now. The
        auditor's figures are those of the last ``check_metadata()``.
        """
        snap = self.metrics_snapshot()
        return {**flatten(snap.bookies, snap.clients), **snap.gauges}

    def metrics_snapshot(self) -> MetricsSnapshot:
        """The cluster's metrics with their histograms whole (for exporters)."""
        with self._lock:
            bookies = [self._bookies[b] for b in self.running_bookies()]
            statuses = [self.runtime.call(b.status) for b in bookies] if bookies else []
            gauges: dict[str, float] = {
                "bookies_running": len(bookies),
                "bookies_readonly": sum(1 for s in statuses if s["readonly"]),
                "disk_bytes": sum(
                    s.get("journal_bytes", 0) + s.get("entry_log_bytes", 0) for s in statuses
                ),
                "ledgers": sum(s.get("ledgers", 0) for s in statuses),
                "limbo_ledgers": sum(s.get("limbo_ledgers", 0) for s in statuses),
                "connections": self._connections(),
                "auditor_checks": self._checks,
            }
            if self._last_check is not None:
                for category, n in self._last_check.counts().items():
                    gauges[f"auditor_{category}"] = n
            return MetricsSnapshot(
                sum_bookies(self._bookie_metrics),
                sum_clients(c.ctx.metrics for c in self._clients),
                gauges,
            )

    def _connections(self) -> int:
        """Client connections the bookies' TCP servers hold (0 in-process)."""
        servers = getattr(self._transport, "servers", None)
        return sum(s.connections for s in servers.values()) if servers else 0


class ProcessCluster(ProcessBookies, LocalCluster):
    """What ``LocalCluster(..., processes=True)`` makes: this cluster with each bookie in an
    OS process of its own (embedlog/process/bookies.py)."""
