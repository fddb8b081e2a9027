"""connect(): a client in another process, reaching a cluster's bookies over TCP.

The cluster (``embedlog sandbox``, or a LocalCluster(transport="tcp") sharing
its metadata through ZooKeeper) registers each bookie's address in the
metadata store; the client looks addresses up there, so it needs nothing but
the metadata URI (and its TLS files when the bookies use TLS). A bookie whose
registration is gone for a while (its ZooKeeper session expired and it has not
registered again yet) is looked up in its cookie, which records the address it
booted with (docs/operations.md, "ZooKeeper outages").
"""

from __future__ import annotations

import asyncio
import functools
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embedlog.errors import BKError, BookieUnavailableError
from embedlog.metadata.uri import DEFAULT_METADATA_TIMEOUT

if TYPE_CHECKING:
    from embedlog.client import Client
    from embedlog.metadata.client import MetadataClient
    from embedlog.metadata.store import MetadataStore


@functools.cache
def _connected_client_class() -> type[Client]:
    # Built on first use: `embedlog` exports connect() eagerly (a lazy export would be
    # shadowed by this very module once imported), and must not pull in the whole client.
    from embedlog.client import Client
    from embedlog.metadata.client import MetadataClient
    from embedlog.runtime import Runtime
    from embedlog.transport.tcp import TcpTransport

    class ConnectedClient(Client):
        """A Client that owns its runtime, metadata store and transport, and closes them."""

        def __init__(
            self,
            runtime: Runtime,
            store: MetadataStore,
            transport: TcpTransport,
            **options: Any,
        ) -> None:
            super().__init__(runtime, MetadataClient(store), transport, **options)
            self._store = store
            self.transport = transport
            self._released = False

        def close(self) -> None:
            if self._released:
                return
            self._released = True
            try:
                super().close()
            finally:
                try:
                    self.runtime.run(self.transport.close(), timeout=10)
                finally:
                    self._store.close()
                    self.runtime.close(
                        f"client {self.name} is closed: it and its ledger handles take no "
                        "more calls; connect() again"
                    )

    return ConnectedClient


def connect(
    metadata_uri: str | None,
    *,
    name: str = "client",
    request_timeout: float = 5.0,
    tls_ca: str | Path | None = None,
    tls_cert: str | Path | None = None,
    tls_key: str | Path | None = None,
    data_dir: str | Path | None = None,
    metadata_timeout: float = DEFAULT_METADATA_TIMEOUT,
    **options: Any,
) -> Client:
    """A Client of the cluster whose metadata ``metadata_uri`` names ("zk://host:port/path").

    ``metadata_timeout``: seconds to wait for ZooKeeper, at connect and then in each
    metadata call, before raising MetadataUnavailableError (a MetadataError); through an
    outage the client reconnects at least every 1.2 s (docs/operations.md).

    ``tls_ca``: the CA certificate the bookies' certificates must verify against
    (a TLS sandbox prints it; LocalCluster keeps it as data_dir/tls/cert.pem).
    ``tls_cert``, ``tls_key``: this client's certificate and key, for bookies that
    require client certificates (mutual TLS). With none of the three the client
    connects without TLS; with only ``tls_cert``/``tls_key``, it trusts the system's
    CAs. A missing file or a key of another certificate raises TlsConfigError (a
    ValueError) naming the file. ``data_dir`` is only for ``metadata_uri=None`` (the embedded
    store, which one process at a time can open). ``options`` go to Client.
    Closing the client closes its connections, metadata session and event loop.
    """
    if metadata_uri is None and data_dir is None:
        raise ValueError(
            "metadata_uri=None means the embedded store of one process; give the "
            "cluster's zk:// URI (or data_dir for an embedded store no one else holds)"
        )
    from embedlog.metadata.uri import open_store

    if isinstance(metadata_timeout, bool) or not isinstance(metadata_timeout, int | float):
        raise TypeError(f"metadata_timeout must be a number of seconds, not {metadata_timeout!r}")
    if not metadata_timeout > 0:
        raise ValueError(f"metadata_timeout must be > 0 seconds, got {metadata_timeout!r}")
    return connect_with(
        lambda: open_store(
            metadata_uri,
            Path(data_dir or tempfile.gettempdir()),
            metadata_timeout=metadata_timeout,
        ),
        name=name,
        request_timeout=request_timeout,
        tls_ca=tls_ca,
        tls_cert=tls_cert,
        tls_key=tls_key,
        **options,
    )


def connect_with(
    open_metadata: Callable[[], MetadataStore],
    *,
    name: str = "client",
    request_timeout: float = 5.0,
    tls_ca: str | Path | None = None,
    tls_cert: str | Path | None = None,
    tls_key: str | Path | None = None,
    **options: Any,
) -> Client:
    """connect() over the metadata store ``open_metadata()`` opens (the command line passes
    read-only views); the client owns the store and closes it. TLS files are checked first,
    before anything connects."""
    from embedlog.metadata.client import MetadataClient
    from embedlog.runtime import Runtime
    from embedlog.transport.tcp import TcpTransport
    from embedlog.transport.tls import client_context

    tls = tls_ca is not None or tls_cert is not None or tls_key is not None
    ssl_context = client_context(tls_ca, tls_cert, tls_key) if tls else None
    runtime = Runtime(f"embedlog-{name}")
    store: MetadataStore | None = None
    try:
        store = open_metadata()
        meta = MetadataClient(store)
        transport = TcpTransport(_metadata_resolver(meta), ssl_context=ssl_context)
        # ConnectedClient takes the store (it owns and closes it); mypy sees Client's init.
        return _connected_client_class()(
            runtime,
            store,  # type: ignore[arg-type]
            transport,
            name=name,
            request_timeout=request_timeout,
            **options,
        )
    except BaseException:
        if store is not None:
            store.close()
        runtime.close()
        raise


def _metadata_resolver(meta: MetadataClient) -> Callable[[str], Awaitable[str | None]]:
    """bookie id -> its address, read when a connection is (re)opened: the one it
    registered, else the one its cookie records.

    A registration is an ephemeral node: it is gone from when the bookie's session
    expires until the bookie registers again, while the bookie serves on. The cookie is
    not ephemeral and records the address the bookie last booted with (a bookie booting
    at another address is refused until its cookie is fixed to the new one), so a client
    started meanwhile still reaches it; a bookie really down refuses the connection."""

    def lookup(bookie_id: str) -> str | None:
        info = meta.bookie_info(bookie_id)
        address = info.get("address") if info else None
        if not address:
            address = _cookie_address(meta, bookie_id)
        if not address:
            return None
        address = str(address)
        if address.startswith("inprocess:"):
            raise BookieUnavailableError(
                f"bookie {bookie_id} serves in-process only ({address}); start its cluster "
                'with transport="tcp" to reach it from another process'
            )
        return address

    async def resolve(bookie_id: str) -> str | None:
        if meta.store.blocking_io:  # e.g. ZooKeeper: a network round trip
            return await asyncio.get_running_loop().run_in_executor(None, lookup, bookie_id)
        return lookup(bookie_id)

    return resolve


def _cookie_address(meta: MetadataClient, bookie_id: str) -> str | None:
    from embedlog.bookie.cookie import Cookie

    stored = meta.read_cookie(bookie_id)
    if stored is None:
        return None
    try:
        return Cookie.from_bytes(stored[0]).address or None
    except BKError:  # unreadable: as if there were none (the bookie's boot says why)
        return None


__all__ = ["connect"]
