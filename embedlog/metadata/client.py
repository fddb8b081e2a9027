"""MetadataClient: the cluster's records (ledgers, bookies, cookies) on top of a MetadataStore.

Layout of the tree::

    /ledgers/<20-digit id>        LedgerMetadata (JSON), compare-and-swap by version
    /idgen                        the next ledger id (a counter, CAS-incremented)
    /bookies/available/<id>       ephemeral: bookie info (JSON: address, rack)
    /bookies/readonly/<id>        ephemeral: same, for read-only bookies
    /cookies/<id>                 the bookie's cookie (bytes of embedlog.bookie.cookie)
    /bookies/claims/<id>          who chose this bookie id (host and directory), so that
                                  clusters sharing one store never pick the same one
    /underreplicated/<ledger id>  JSON: {"since": unix time, "bookies": [...]}
    /instance                     the cluster's instance id
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from embedlog.clock import SYSTEM_CLOCK, Clock
from embedlog.errors import CookieError, MetadataError, NoSuchLedgerInMetadataError
from embedlog.metadata.ledger_metadata import LedgerMetadata
from embedlog.metadata.store import (
    ANY_VERSION,
    MetadataStore,
    MetadataVersionError,
    NodeExistsError,
    NoNodeError,
)

LEDGERS = "/ledgers"
AVAILABLE = "/bookies/available"
READONLY = "/bookies/readonly"
COOKIES = "/cookies"
UNDERREPLICATED = "/underreplicated"
STATUS = "/bookies/status"
CLAIMS = "/bookies/claims"

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

# The MetadataClient methods that only read the store (``MetadataClient.call``).
_READS: set[Callable[..., Any]] = set()


def _read(fn: F) -> F:
    _READS.add(fn)
    return fn


def ledger_path(ledger_id: int) -> str:
    return f"{LEDGERS}/{ledger_id:020d}"


# How many ledgers' last parsed metadata a client keeps (``read_ledger``): a follower
# re-reads its stream's after every LAC it sees, and it is mostly unchanged.
PARSED_KEPT = 256

# How often an operation held back by an injected delay looks at the setting again, so
# that ``heal()`` releases operations that are already waiting.
_DELAY_RECHECK = 0.05


class RegistrationTakenError(MetadataError):
    """Another session holds the bookie's registration (``register_again``)."""


class MetadataClient:
    def __init__(
        self,
        store: MetadataStore,
        delay: Callable[[], float] | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.store = store
        # Where the records' timestamps come from (when a ledger was marked under-replicated),
        # and the clock of the auditors built on this client (embedlog/clock.py).
        self.clock = clock
        # Fault injection (LocalCluster's ``network.delay_metadata``): seconds every
        # operation made through ``call`` waits before it reaches the store.
        self.delay = delay
        # Ledger id -> (stored bytes, the metadata parsed from them), oldest first.
        self._parsed: dict[int, tuple[bytes, LedgerMetadata]] = {}
        self._parsed_lock = threading.Lock()  # calls run in worker threads too

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` (a call of this client) from the event loop: in a worker thread
        when it may block (ZooKeeper's network round trips, the embedded store's synced
        writes), so the loop never stalls; on the loop otherwise, saving the thread hop."""
        if self.delay is not None:
            await self._injected_delay(self.delay)
        if self.blocks(fn):
            return await asyncio.get_running_loop().run_in_executor(None, fn, *args)
        return fn(*args)

    def blocks(self, fn: Callable[..., Any]) -> bool:
        """Whether ``call`` runs ``fn`` in a thread: a read of this client's (a method
        marked ``_read``) when the store's reads block, anything else when its calls do."""
        if getattr(fn, "__self__", None) is self and getattr(fn, "__func__", None) in _READS:
            return self.store.blocking_reads
        return self.store.blocking_io

    @staticmethod
    async def _injected_delay(delay: Callable[[], float]) -> None:
        # Sleeps on the loop (the bookies share it), in steps that re-read the setting:
        # an operation waits until the current delay has passed since it started.
        loop = asyncio.get_running_loop()
        start = loop.time()
        while (remaining := start + delay() - loop.time()) > 0:
            await asyncio.sleep(min(remaining, _DELAY_RECHECK))

    # -- cluster ---------------------------------------------------------------------------

    def instance_id(self) -> str:
        """The cluster's unique id, created on first use; it goes into every cookie."""
        try:
            return self.store.get("/instance")[0].decode()
        except NoNodeError:
            pass
        new = uuid.uuid4().hex
        try:
            self.store.create("/instance", new.encode())
            return new
        except NodeExistsError:
            return self.store.get("/instance")[0].decode()

    # -- ledgers ---------------------------------------------------------------------------

    def next_ledger_id(self) -> int:
        while True:
            try:
                data, version = self.store.get("/idgen")
            except NoNodeError:
                try:
                    self.store.create("/idgen", b"1")
                    return 0
                except NodeExistsError:
                    continue
            value = int(data)
            try:
                self.store.set("/idgen", str(value + 1).encode(), version)
                return value
            except MetadataVersionError:
                continue

    def create_ledger(self, md: LedgerMetadata) -> LedgerMetadata:
        """Store new metadata; assigns an id when ``md.ledger_id`` is -1."""
        while True:
            candidate = md if md.ledger_id >= 0 else md.evolve(ledger_id=self.next_ledger_id())
            try:
                version = self.store.create(ledger_path(candidate.ledger_id), candidate.to_bytes())
            except NodeExistsError:
                if md.ledger_id >= 0:
                    raise
                continue
            return candidate.evolve(version=version)

    @_read
    def read_ledger(self, ledger_id: int) -> LedgerMetadata:
        try:
            data, version = self.store.get(ledger_path(ledger_id))
        except NoNodeError:
            raise NoSuchLedgerInMetadataError(f"ledger {ledger_id} does not exist") from None
        return self._parse(ledger_id, data, version)

    def _parse(self, ledger_id: int, data: bytes, version: int) -> LedgerMetadata:
        """``LedgerMetadata.from_bytes``, or the (immutable) metadata parsed last time when
        the store gave the same bytes at the same version: parsing cost a follower's
        re-read as much as the rest of it."""
        kept = self._parsed.get(ledger_id)
        if kept is not None and kept[1].version == version and kept[0] == data:
            return kept[1]
        md = LedgerMetadata.from_bytes(data, version)
        with self._parsed_lock:
            self._parsed.pop(ledger_id, None)
            self._parsed[ledger_id] = (data, md)
            if len(self._parsed) > PARSED_KEPT:
                del self._parsed[next(iter(self._parsed))]
        return md

    def write_ledger(self, md: LedgerMetadata) -> LedgerMetadata:
        """Compare-and-swap ``md`` over the version it was read at; returns it with the new version.

        MetadataVersionError if someone else changed the ledger since.
        """
        try:
            version = self.store.set(ledger_path(md.ledger_id), md.to_bytes(), md.version)
        except NoNodeError:
            raise NoSuchLedgerInMetadataError(f"ledger {md.ledger_id} does not exist") from None
        return md.evolve(version=version)

    def delete_ledger(self, ledger_id: int, version: int = ANY_VERSION) -> None:
        try:
            self.store.delete(ledger_path(ledger_id), version)
        except NoNodeError:
            raise NoSuchLedgerInMetadataError(f"ledger {ledger_id} does not exist") from None

    def ledger_is_gone(self, ledger_id: int) -> bool:
        """Whether the store says, after a sync, that ``ledger_id`` has no metadata: True
        only on that answer (an error raises). What a bookie's garbage collection asks
        before it drops a ledger's data (bookie/gc.py)."""
        path = ledger_path(ledger_id)
        self.store.sync(path)
        try:
            self.store.get(path)
        except NoNodeError:
            return True
        return False

    def list_ledgers(self) -> Iterator[int]:
        for name in self.store.children(LEDGERS):
            yield int(name)

    # -- bookies ---------------------------------------------------------------------------

    def register_bookie(
        self, store: MetadataStore, bookie_id: str, info: dict[str, object], *, readonly: bool
    ) -> None:
        """Register through ``store`` (the bookie's own session) as available or read-only."""
        path = f"{READONLY if readonly else AVAILABLE}/{bookie_id}"
        other = f"{AVAILABLE if readonly else READONLY}/{bookie_id}"
        for p in (path, other):
            try:
                store.delete(p)
            except NoNodeError:
                pass
        store.create(path, json.dumps(info).encode(), ephemeral=True)

    def register_again(
        self,
        store: MetadataStore,
        bookie_id: str,
        info: dict[str, object],
        *,
        readonly: bool,
        cookie: tuple[bytes, int] | None,
    ) -> None:
        """After a session expiry: register as ``register_bookie`` does, unless the
        bookie's cookie changed since it booted (CookieError: an operator's cookie fix made
        another incarnation this bookie) or another session holds its registration
        (RegistrationTakenError: a second process with this id)."""
        if self.read_cookie(bookie_id) != cookie:
            raise CookieError(
                f"bookie {bookie_id}'s cookie in the metadata changed since it booted "
                "(`embedlog bookie fixcookie` for a new incarnation?): it does not register "
                "again; stop this process"
            )
        for p in (f"{AVAILABLE}/{bookie_id}", f"{READONLY}/{bookie_id}"):
            if store.held_by_another_session(p):
                raise RegistrationTakenError(
                    f"another session holds bookie {bookie_id}'s registration ({p}): a "
                    "second process with this bookie id? This one retries"
                )
        self.register_bookie(store, bookie_id, info, readonly=readonly)

    def unregister_bookie(self, store: MetadataStore, bookie_id: str) -> None:
        for p in (f"{AVAILABLE}/{bookie_id}", f"{READONLY}/{bookie_id}"):
            try:
                store.delete(p)
            except NoNodeError:
                pass

    @_read
    def writable_bookies(self) -> list[str]:
        return self.store.children(AVAILABLE)

    @_read
    def readonly_bookies(self) -> list[str]:
        return self.store.children(READONLY)

    @_read
    def bookie_info(self, bookie_id: str) -> dict[str, object] | None:
        for base in (AVAILABLE, READONLY):
            try:
                return dict(json.loads(self.store.get(f"{base}/{bookie_id}")[0]))
            except NoNodeError:
                continue
        return None

    @_read
    def bookie_infos(self, *, readonly: bool = False) -> dict[str, dict[str, object]]:
        """Writable bookies (with ``readonly``, read-only ones too) -> their registered info
        (address, rack; {} when a bookie left meanwhile)."""
        ids = self.writable_bookies() + (self.readonly_bookies() if readonly else [])
        return {b: self.bookie_info(b) or {} for b in ids}

    def publish_bookie_status(self, bookie_id: str, status: dict[str, object]) -> None:
        """Persist a bookie's last status (boot, BP-46 repair progress) for ``bookie status``."""
        path = f"{STATUS}/{bookie_id}"
        data = json.dumps(status, sort_keys=True).encode()
        try:
            self.store.set(path, data, ANY_VERSION)
        except NoNodeError:
            try:
                self.store.create(path, data)
            except NodeExistsError:
                self.store.set(path, data, ANY_VERSION)

    @_read
    def bookie_status(self, bookie_id: str) -> dict[str, object] | None:
        try:
            return dict(json.loads(self.store.get(f"{STATUS}/{bookie_id}")[0]))
        except NoNodeError:
            return None

    def claim_bookie_id(self, bookie_id: str, owner: str) -> str | None:
        """Make ``bookie_id`` ``owner``'s (atomically: one of two racing claims wins).

        None when it is ``owner``'s now or was before; else the owner that holds it.
        """
        path = f"{CLAIMS}/{bookie_id}"
        try:
            self.store.create(path, owner.encode())
            return None
        except NodeExistsError:
            pass
        try:
            holder = self.store.get(path)[0].decode()
        except NoNodeError:  # released meanwhile: try again
            return self.claim_bookie_id(bookie_id, owner)
        return None if holder == owner else holder

    def bookie_id_taken(self, bookie_id: str, owner: str) -> str | None:
        """Who holds ``bookie_id`` if not ``owner`` (a claim, or a cookie without one)."""
        try:
            holder = self.store.get(f"{CLAIMS}/{bookie_id}")[0].decode()
        except NoNodeError:
            if self.read_cookie(bookie_id) is not None:
                return f"the bookie whose cookie is stored under {COOKIES}/{bookie_id}"
            return None
        return None if holder == owner else holder

    @_read
    def known_bookies(self) -> list[str]:
        """Every bookie that ever wrote a cookie, running or not."""
        return sorted(self.store.children(COOKIES))

    # -- cookies ---------------------------------------------------------------------------

    @_read
    def read_cookie(self, bookie_id: str) -> tuple[bytes, int] | None:
        try:
            return self.store.get(f"{COOKIES}/{bookie_id}")
        except NoNodeError:
            return None

    def write_cookie(self, bookie_id: str, data: bytes, version: int | None) -> int:
        """Create (``version`` None) or compare-and-swap the bookie's cookie."""
        path = f"{COOKIES}/{bookie_id}"
        if version is None:
            return self.store.create(path, data)
        return self.store.set(path, data, version)

    def delete_cookie(self, bookie_id: str) -> None:
        try:
            self.store.delete(f"{COOKIES}/{bookie_id}")
        except NoNodeError:
            pass

    # -- under-replication (auditor) ---------------------------------------------------------

    def mark_underreplicated(self, ledger_id: int, bookies: list[str]) -> None:
        path = f"{UNDERREPLICATED}/{ledger_id}"
        doc = json.dumps({"since": self.clock.time(), "bookies": sorted(bookies)}).encode()
        try:
            self.store.create(path, doc)
        except NodeExistsError:
            pass

    @_read
    def underreplicated(self) -> dict[int, dict[str, object]]:
        out: dict[int, dict[str, object]] = {}
        for name in self.store.children(UNDERREPLICATED):
            try:
                out[int(name)] = json.loads(self.store.get(f"{UNDERREPLICATED}/{name}")[0])
            except NoNodeError:
                continue
        return out

    def clear_underreplicated(self, ledger_id: int) -> None:
        try:
            self.store.delete(f"{UNDERREPLICATED}/{ledger_id}")
        except NoNodeError:
            pass
