"""One bookie serving over TCP in this process, registered in ZooKeeper: what
``embedlog bookie run`` runs until it is told to stop.

``start`` checks everything an operator can get wrong before the bookie boots (its
settings, the port, ZooKeeper, the cookies) and reports each as a ``StartError``: one
line naming the cause and the fix. ``stop`` is the clean shutdown: the server stops
listening, the bookie syncs its journal, flushes, leaves ZooKeeper and releases its files.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from embedlog.bookie import cookie as cookies
from embedlog.bookie.config import BookieConfig
from embedlog.cluster_bookies import server_ssl as bookie_server_ssl
from embedlog.errors import BKError, MetadataUnavailableError
from embedlog.process.settings import RunSettings, SettingError, choose_bookie_id

if TYPE_CHECKING:
    from embedlog.bookie.bookie import Bookie
    from embedlog.metadata.client import MetadataClient
    from embedlog.metadata.zookeeper_store import ZooKeeperMetadataStore, ZooKeeperSession
    from embedlog.runtime import Runtime
    from embedlog.transport.tcp import TcpTransport
    from embedlog.transport.tcp_server import BookieServer

log = logging.getLogger(__name__)

REPAIR_REQUEST_TIMEOUT = 5.0


class StartError(Exception):
    """Why the bookie did not start; ``kind`` names the embedlog error it stands for
    (``CookieError``, ...) so that a supervisor can raise the same."""

    def __init__(self, message: str, kind: str = "RuntimeError") -> None:
        super().__init__(message)
        self.kind = kind


def disk_bookie_id(data_dir: Path) -> str | None:
    """The bookie id the cookies on these disks name (None: no readable cookie)."""
    probe = BookieConfig(bookie_id="probe", data_dir=data_dir)
    for d in cookies.cookie_dirs(probe):
        try:
            return cookies.Cookie.from_bytes((d / cookies.COOKIE_FILE).read_bytes()).bookie_id
        except (OSError, BKError):
            continue
    return None


def check_disks_free(config: BookieConfig) -> None:
    """Another process's bookie on these disks, said first: its cookies would otherwise be
    reported as not matching this command's address (with a fix that must not be used)."""
    from embedlog.dirlock import DirLock, DirLockedError

    if not config.index_dir.is_dir():
        return
    try:
        DirLock(config.index_dir).release()
    except DirLockedError as exc:
        raise StartError(
            f"bookie {config.bookie_id}'s disks are in use: its index {exc}; one bookie at a "
            "time may use a bookie's disks: stop the other one first, or give another --data-dir",
            kind="BookieIOError",
        ) from None


def check_port(host: str, port: int) -> None:
    """Fail now, before booting and registering, if the bookie could not listen."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _name, address = infos[0]
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server will
            s.bind(address)
    except socket.gaierror as exc:
        why = f"{host!r} does not resolve ({exc.strerror})"
        raise StartError(f"--listen {host}:{port}: {why}") from None
    except OSError as exc:
        raise StartError(listen_error(host, port, exc)) from None


def listen_error(host: str, port: int, exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return (
            f"cannot listen on {host}:{port}: the port is in use (another bookie or program "
            "holds it); stop that process or give another --listen port"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"cannot listen on {host}:{port}: {host} is not an address of this host"
    if exc.errno == errno.EACCES:
        return f"cannot listen on {host}:{port}: permission denied; use a port above 1023"
    return f"cannot listen on {host}:{port}: {exc.strerror or exc}"


def cookie_refusal(config: BookieConfig, meta: MetadataClient) -> StartError | None:
    """What the boot's cookie check would refuse, said in one line for this command."""
    check = cookies.check_cookies(config, meta)
    bid = config.bookie_id
    if check.foreign:
        return StartError(
            f"bookie {bid} refuses to boot: {'; '.join(check.foreign)}", kind="CookieError"
        )
    if not check.problems or config.auto_fix_cookies:
        return None
    fresh = all(
        not d.exists() or not any(p.name != cookies.COOKIE_FILE for p in d.iterdir())
        for d in cookies.cookie_dirs(config)
    )
    stored = meta.read_cookie(bid)
    if fresh and stored is not None:
        holder = cookies.Cookie.from_bytes(stored[0]).address
        return StartError(
            f"bookie id {bid} is taken in this cluster (by the bookie at {holder}, its cookie "
            f"says) and the disks in {config.data_dir} are empty: give this bookie another "
            f"--id; if this is bookie {bid} with new disks, start it once with "
            "--auto-fix-cookies (it then fences its ledgers and repairs them from its peers)",
            kind="CookieError",
        )
    return StartError(
        f"bookie {bid} refuses to boot: {cookie_mismatch(config, meta)}. It may have lost "
        "entries it acknowledged: to accept the disks as they are, start it once with "
        "--auto-fix-cookies (it then fences its ledgers and repairs them from its peers)",
        kind="CookieError",
    )


def cookie_mismatch(config: BookieConfig, meta: MetadataClient) -> str:
    """How the cookies differ from what this bookie would write, each difference once with
    every place that has it (not one cookie dump per directory)."""
    expected = cookies.expected_cookie(config, meta)
    stored = meta.read_cookie(config.bookie_id)
    found: dict[str, cookies.Cookie | None] = {
        "the metadata store": None if stored is None else cookies.Cookie.from_bytes(stored[0])
    }
    for d in cookies.cookie_dirs(config):
        try:
            found[f"{d.name}/"] = cookies.Cookie.from_bytes((d / cookies.COOKIE_FILE).read_bytes())
        except (OSError, BKError):
            found[f"{d.name}/"] = None
    missing = [where for where, c in found.items() if c is None]
    differences: dict[str, list[str]] = {}
    for where, c in found.items():
        if c is None:
            continue
        for name, now in (
            ("address", expected.address),
            ("directories", ", ".join(expected.directories)),
            ("instance id", expected.instance_id),
        ):
            was = c.address if name == "address" else c.instance_id
            if name == "directories":
                was = ", ".join(c.directories)
            if was != now:
                differences.setdefault(f"record {name} {was}, and it now has {now}", []).append(
                    where
                )
    parts = [f"the cookies in {', '.join(w)} {d}" for d, w in differences.items()]
    if missing:
        parts.append(f"no cookie in {', '.join(missing)} (new or wiped)")
    return "; ".join(parts) or "its cookies do not match"


class BookieService:
    """A bookie of a cluster whose metadata is in ZooKeeper, served on its own port."""

    def __init__(self, settings: RunSettings) -> None:
        self.settings = settings
        self.config: BookieConfig | None = None
        self._store: ZooKeeperMetadataStore | None = None
        self._session: ZooKeeperSession | None = None
        self._runtime: Runtime | None = None
        self._bookie: Bookie | None = None
        self._server: BookieServer | None = None
        self._peers: TcpTransport | None = None

    @property
    def bookie_id(self) -> str:
        assert self.config is not None
        return self.config.bookie_id

    @property
    def session_id(self) -> tuple[int, bytes] | None:
        """The ZooKeeper session that holds the bookie's registration."""
        return None if self._session is None else self._session.session_id

    def on_registration_renewed(self, callback: Callable[[], None]) -> None:
        """``callback()`` (on the bookie's loop) each time the bookie registered again with
        a new session (``session_id`` changed): the command reports it to its supervisor."""
        assert self._bookie is not None
        self._bookie.registration.on_renewed = callback

    def start(self) -> None:
        """Boot and serve; StartError (one line: cause and fix) when it cannot."""
        try:
            self._start()
        except BaseException:
            self._release()
            raise

    def _start(self) -> None:
        s = self.settings
        try:
            bid = choose_bookie_id(s.bookie_id, disk_bookie_id(s.data_dir), s.advertise)
            config = BookieConfig.from_settings(bid, s.data_dir, address=s.advertise, **s.bookie)
            server_ssl = bookie_server_ssl(config)
            client_ssl = self._client_tls(config)
        except (SettingError, ValueError) as exc:
            raise StartError(str(exc), kind="ValueError") from None
        self.config = config
        check_disks_free(config)
        host, port = s.listen
        check_port(host, port)
        from embedlog.metadata.client import MetadataClient
        from embedlog.metadata.uri import parse_zk_uri
        from embedlog.metadata.zookeeper_store import DEFAULT_CHROOT, ZooKeeperMetadataStore

        hosts, chroot = parse_zk_uri(s.metadata_uri)
        try:
            self._store = ZooKeeperMetadataStore(
                hosts, chroot or DEFAULT_CHROOT, metadata_timeout=s.metadata_timeout
            )
        except MetadataUnavailableError:
            raise StartError(
                f"cannot reach ZooKeeper at {hosts} within {s.metadata_timeout:g}s: start it, "
                "or fix --metadata-uri (zk://host:port/path)",
                kind="MetadataError",
            ) from None
        meta = MetadataClient(self._store)
        refusal = cookie_refusal(config, meta)
        if refusal is not None:
            raise refusal
        self._boot(config, meta, server_ssl, client_ssl)

    def _boot(
        self,
        config: BookieConfig,
        meta: MetadataClient,
        server_ssl: ssl.SSLContext | None,
        client_ssl: ssl.SSLContext | None,
    ) -> None:
        from embedlog.bookie.bookie import Bookie
        from embedlog.client import Client
        from embedlog.cluster_bookies import repair_client_name
        from embedlog.connect import _metadata_resolver
        from embedlog.repair_client import repair_clients
        from embedlog.runtime import Runtime
        from embedlog.transport.limits import ConnectionLimits
        from embedlog.transport.tcp import TcpTransport
        from embedlog.transport.tcp_server import BookieServer

        assert self._store is not None
        runtime = self._runtime = Runtime(f"bookie-{config.bookie_id}")
        self._session = self._store.session()
        peers = self._peers = TcpTransport(_metadata_resolver(meta), ssl_context=client_ssl)

        def repair_client() -> Client:
            return Client(
                runtime,
                meta,
                peers,
                name=repair_client_name(config.bookie_id),
                request_timeout=REPAIR_REQUEST_TIMEOUT,
            )

        bookie = Bookie(config, meta, self._session, client_factory=repair_clients(repair_client))
        try:
            runtime.run(bookie.start())
        except BKError as exc:
            raise StartError(str(exc), kind=type(exc).__name__) from None
        except OSError as exc:
            raise StartError(f"bookie {config.bookie_id} cannot boot: {exc}") from None
        self._bookie = bookie
        host, port = self.settings.listen
        limits = ConnectionLimits.of(config)
        self._server = BookieServer(bookie, host, port, server_ssl, limits=limits)
        try:
            runtime.run(self._server.start())
        except OSError as exc:  # taken between the check and now
            self._server = self._bookie = None
            runtime.run(bookie.stop())  # it served nothing: leave as cleanly as it came
            raise StartError(listen_error(host, port, exc)) from None

    @staticmethod
    def _client_tls(config: BookieConfig) -> ssl.SSLContext | None:
        """The repair client's TLS, to reach its peers: they are trusted through ``tls_ca``
        (else through the bookie's own certificate: one self-signed for the whole cluster),
        and shown this bookie's certificate when they verify clients."""
        if not config.tls:
            return None
        from embedlog.transport import tls

        verifies = config.tls_ca is not None
        if verifies:
            assert config.tls_cert is not None and config.tls_key is not None
            tls.check_identity(config.tls_cert, config.tls_key, role="client")
        return tls.client_context(
            config.tls_ca or config.tls_cert,
            config.tls_cert if verifies else None,
            config.tls_key if verifies else None,
        )

    def stop(self) -> None:
        """Clean shutdown; BKError (BookieIOError) if the final flush failed (the bookie is
        stopped anyway, and its next boot replays its journal).

        It ends within seconds whatever ZooKeeper is doing: the journal is synced first,
        then metadata calls stop waiting for ZooKeeper, so that during an outage the
        bookie's last status and its unregistering fail at once (logged) instead of waiting
        for a reconnect. The registration is an ephemeral node of the bookie's session:
        closing the session removes it, or ZooKeeper does when the session times out.
        """
        try:
            runtime = self._runtime
            if runtime is not None and self._server is not None:
                runtime.run(self._server.close(), timeout=30)
            self._server = None
            if runtime is not None and self._bookie is not None:
                bookie, self._bookie = self._bookie, None
                journal = bookie.journal
                if journal is not None:
                    runtime.run(journal.sync(), timeout=120)
                for store in (self._session, self._store):
                    if store is not None:
                        store.stop_waiting()
                runtime.run(bookie.stop(), timeout=120)
        finally:
            self._release()

    def _release(self) -> None:
        runtime, self._runtime = self._runtime, None
        if runtime is not None:
            if self._server is not None:
                with contextlib.suppress(Exception):
                    runtime.run(self._server.close(), timeout=30)
            if self._bookie is not None:
                runtime.call(self._bookie.crash)  # a failed start: nothing was served
            if self._peers is not None:
                with contextlib.suppress(Exception):
                    runtime.run(self._peers.close(), timeout=10)
            runtime.close("the bookie stopped")
        self._server = self._bookie = self._peers = None
        for store in (self._session, self._store):
            if store is not None:
                with contextlib.suppress(Exception):
                    store.close()
        self._session = self._store = None
