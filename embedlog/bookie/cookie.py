"""Cookies: a bookie's identity, written to each of its disks and to the metadata store.

A disk without the cookie the metadata store expects was replaced or wiped;
a disk with another bookie's cookie was swapped. Either way the bookie may
have lost entries it acknowledged, so it must not boot as if nothing happened
(see closing-ledgers-safely.md, "Bringing back a dead bookie").
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from attrs import frozen

from embedlog.bookie.config import BookieConfig
from embedlog.bookie.disk import REAL_DISK, Disk, child
from embedlog.errors import CookieError
from embedlog.metadata.client import MetadataClient

COOKIE_FILE = "COOKIE"


@frozen
class Cookie:
    bookie_id: str
    address: str
    directories: tuple[str, ...]
    instance_id: str

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "bookie_id": self.bookie_id,
                "address": self.address,
                "directories": list(self.directories),
                "instance_id": self.instance_id,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Cookie:
        return _parsed(data)


@functools.lru_cache(maxsize=64)
def _parsed(data: bytes) -> Cookie:
    """A cookie's bytes read, remembered: a boot reads the same four cookies (three disks
    and the metadata store's) and every boot of a bookie the same ones again. A simulated
    history boots bookies some 40 times, and the JSON parse was 1% of its CPU. Cookies
    are immutable values, so sharing one is safe; unreadable bytes raise every time."""
    try:
        d = json.loads(data)
        return Cookie(d["bookie_id"], d["address"], tuple(d["directories"]), d["instance_id"])
    except (ValueError, KeyError, TypeError) as exc:
        raise CookieError(f"unreadable cookie: {exc}") from exc


def cookie_dirs(config: BookieConfig) -> list[Path]:
    return [config.journal_dir, config.ledger_dir, config.index_dir]


def expected_cookie(
    config: BookieConfig, metadata: MetadataClient, disk: Disk = REAL_DISK
) -> Cookie:
    return Cookie(
        config.bookie_id,
        config.advertised_address,
        tuple(str(disk.resolve(d)) for d in cookie_dirs(config)),
        metadata.instance_id(),
    )


def _read_dir_cookie(directory: Path, disk: Disk) -> Cookie | str | None:
    if not disk.exists(directory):
        return "missing"
    try:
        data = disk.read(child(directory, COOKIE_FILE))
    except FileNotFoundError:
        return None
    try:
        return Cookie.from_bytes(data)
    except CookieError:
        return "corrupt"


def _is_empty(directory: Path, disk: Disk) -> bool:
    try:
        return not disk.listdir(directory)
    except FileNotFoundError:
        return True


@frozen
class CookieCheck:
    """What the boot-time cookie check found."""

    first_boot: bool
    problems: tuple[str, ...] = ()  # missing or empty disks, stale metadata: BP-46 can fix
    foreign: tuple[str, ...] = ()  # a disk of another bookie or an unreadable cookie: never

    @property
    def ok(self) -> bool:
        return not self.problems and not self.foreign


def check_cookies(
    config: BookieConfig, metadata: MetadataClient, disk: Disk = REAL_DISK
) -> CookieCheck:
    """First boot: no cookie anywhere and every directory empty."""
    expected = expected_cookie(config, metadata, disk)
    stored = metadata.read_cookie(config.bookie_id)
    dirs = cookie_dirs(config)
    found = {d: _read_dir_cookie(d, disk) for d in dirs}
    no_cookie_anywhere = stored is None and all(c in (None, "missing") for c in found.values())
    if no_cookie_anywhere and all(_is_empty(d, disk) for d in dirs):
        return CookieCheck(first_boot=True)
    if interrupted_first_boot(stored, found, expected, config.index_dir, disk):
        # A first boot that stopped while writing its cookies (a metadata error, a crash):
        # no index was ever created, so the bookie never served. Start it over.
        return CookieCheck(first_boot=True)
    problems: list[str] = []
    foreign: list[str] = []
    if stored is None:
        problems.append(
            f"the metadata store has no cookie for {config.bookie_id}, but its disks have data"
        )
    else:
        meta_cookie = Cookie.from_bytes(stored[0])
        if meta_cookie != expected:
            problems.append(
                f"the metadata store's cookie for {config.bookie_id} does not match this "
                f"bookie's configuration ({meta_cookie} != {expected})"
            )
    for d, c in found.items():
        if c == "missing":
            problems.append(f"directory {d} is missing")
        elif c is None:
            problems.append(f"directory {d} has no cookie: the disk is new or was wiped")
        elif c == "corrupt":
            foreign.append(f"the cookie in {d} is unreadable")
        elif c != expected:
            assert isinstance(c, Cookie)
            if c.bookie_id == config.bookie_id and c.instance_id == expected.instance_id:
                # Our own disk, written under an older configuration (e.g. another address).
                problems.append(f"the cookie in {d} is out of date ({c} != {expected})")
            else:
                foreign.append(
                    f"the cookie in {d} belongs to bookie {c.bookie_id} (instance "
                    f"{c.instance_id}): was the disk swapped? Put the right disk back, or "
                    "wipe this one"
                )
    return CookieCheck(first_boot=False, problems=tuple(problems), foreign=tuple(foreign))


def interrupted_first_boot(
    stored: tuple[bytes, int] | None,
    found: dict[Path, Cookie | str | None],
    expected: Cookie,
    index_dir: Path,
    disk: Disk = REAL_DISK,
) -> bool:
    """Whether a first boot stopped between writing its cookies and creating the index
    (a metadata error or a crash while writing the metadata store's cookie).

    Its signature: the index directory holds this bookie's cookie and nothing else, the
    other directories nothing but that cookie, the metadata store no cookie or this one.
    The index is created right after the cookies and before the bookie registers, so such
    a bookie never served. A wiped index disk has no cookie left: it never looks like this.
    """
    if found.get(index_dir) != expected:
        return False
    if stored is not None:
        try:
            if Cookie.from_bytes(stored[0]) != expected:
                return False
        except CookieError:
            return False
    for d, c in found.items():
        if c == "missing":
            continue
        if c is not None and c != expected:
            return False
        try:
            names = set(disk.listdir(d))
        except FileNotFoundError:
            names = set()
        if names - {COOKIE_FILE, COOKIE_FILE + ".tmp"}:
            return False
    return True


def write_cookies(config: BookieConfig, metadata: MetadataClient, disk: Disk = REAL_DISK) -> Cookie:
    """Write this bookie's cookie to every directory and to the metadata store."""
    cookie = expected_cookie(config, metadata, disk)
    data = cookie.to_bytes()
    for d in cookie_dirs(config):
        disk.mkdir(d)
        disk.write_atomic(child(d, COOKIE_FILE), data)
    stored = metadata.read_cookie(config.bookie_id)
    metadata.write_cookie(config.bookie_id, data, None if stored is None else stored[1])
    return cookie


def cookie_error(config: BookieConfig, problems: list[str], *, fixable: bool = True) -> CookieError:
    if not fixable:
        return CookieError(
            f"bookie {config.bookie_id} refuses to boot: "
            + "; ".join(problems)
            + ". A disk that belongs to another bookie cannot be fixed automatically: its "
            "index describes entries this bookie never stored."
        )
    return CookieError(
        f"bookie {config.bookie_id} refuses to boot: "
        + "; ".join(problems)
        + ". It may have lost entries it acknowledged. Run `embedlog bookie fixcookie "
        f"--data-dir ... {config.bookie_id}` to accept the disks as they are (the bookie then "
        "fences its ledgers and repairs itself from its peers), or set auto_fix_cookies=True."
    )
