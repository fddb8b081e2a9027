"""``embedlog bookie fixcookie``: the BP-46 cookie fix, run by hand on a stopped bookie.

It accepts the bookie's disks as they are (rewrites the cookies) and leaves the
PROTECT marker in the index, so the next boot runs phase one (fence and limbo for
every ledger, then repair from peers) even though the cookies then look fine.
Rewriting the cookies without that marker would bring back the very data loss
the cookie check exists to stop.
"""

from __future__ import annotations

from embedlog.bookie import cookie as cookies
from embedlog.bookie.config import BookieConfig
from embedlog.bookie.disk import REAL_DISK, Disk
from embedlog.bookie.index import PROTECT, LedgerIndex
from embedlog.dirlock import DirLockedError
from embedlog.errors import CookieError
from embedlog.metadata.client import MetadataClient


def fix_cookies(
    config: BookieConfig, metadata: MetadataClient, disk: Disk = REAL_DISK
) -> list[str]:
    """Fix the cookies of a stopped bookie; returns the problems fixed (empty: none)."""
    if metadata.bookie_info(config.bookie_id) is not None:
        raise CookieError(
            f"bookie {config.bookie_id} is running (registered in the metadata store); stop it "
            "first, or restart it with auto_fix_cookies=True"
        )
    check = cookies.check_cookies(config, metadata, disk)
    if check.foreign:
        raise cookies.cookie_error(config, list(check.foreign), fixable=False)
    if check.first_boot or not check.problems:
        return []
    disk.mkdir(config.index_dir)
    # Locking the index also proves that no bookie uses it (a running one holds the lock).
    try:
        lock = disk.lock(config.index_dir)
    except DirLockedError as exc:
        raise CookieError(
            f"bookie {config.bookie_id} is running: its index {exc}; stop it first"
        ) from None
    try:
        # A wiped index disk gets a new index; a damaged one is refused (LedgerIndex).
        index = LedgerIndex(
            config.index_dir, create=not disk.has_index(config.index_dir), disk=disk
        )
        try:
            index.set_marker(PROTECT, True)
        finally:
            index.close()
    finally:
        lock.release()
    cookies.write_cookies(config, metadata, disk)
    return list(check.problems)
