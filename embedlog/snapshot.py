"""A private copy of a stopped LocalCluster's directory, booted only to be looked at.

Read-only commands on a ``--data-dir`` (``embedlog auditor check``, ``ledger read``,
``ledger tail``) need the bookies to answer reads, and a bookie boot writes: journal
replay, markers, a flush, BP-46 phase one, and phase two copying entries from peers.
So they boot a copy instead: the metadata and every bookie-N directory are copied
under shared locks (no process can start writing them meanwhile), the cookies of the
copy are moved to the copy's paths (a cookie records its directories; whatever else
it says, right or wrong, is kept, so a bookie whose cookie is wrong still fails), and
the copy boots with phase two off. The original is never opened for writing, and the
copy is removed afterwards.

The copy costs the disk space and time of the cluster's data: right for a test or
development cluster, and a reason to use ``--metadata-uri`` on a running one.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from embedlog.dirlock import DirLockedError

if TYPE_CHECKING:
    from embedlog.cluster import LocalCluster

BOOKIE_DIR = re.compile(r"^bookie-\d+$")
COOKIE_SUBDIRS = ("journal", "ledgers", "index")


class ClusterInUseError(ValueError):
    """The cluster directory is open in a process: a copy of it could be torn."""


def bookie_dirs(data_dir: Path) -> list[Path]:
    return sorted(p for p in data_dir.iterdir() if p.is_dir() and BOOKIE_DIR.match(p.name))


def relocate_cookie(data: bytes, old_root: str, new_root: str) -> bytes:
    """A cookie whose directories under ``old_root`` now lie under ``new_root``; the rest
    of it (and any directory elsewhere) unchanged. Unreadable data is returned as it is:
    the boot reports it as the original's boot would."""
    try:
        doc = json.loads(data)
        dirs = doc["directories"]
    except (ValueError, KeyError, TypeError):
        return data
    if not isinstance(dirs, list):
        return data
    moved = []
    for d in dirs:
        if isinstance(d, str) and (d == old_root or d.startswith(old_root + "/")):
            d = new_root + d[len(old_root) :]
        moved.append(d)
    doc["directories"] = moved
    return json.dumps(doc, sort_keys=True).encode()


def _relocate_cookies(copy: Path, old_root: str) -> None:
    from embedlog.metadata.client import CLAIMS, MetadataClient
    from embedlog.metadata.leveldb_store import LevelDBMetadataStore
    from embedlog.metadata.store import NoNodeError

    new_root = str(copy.resolve())
    with LevelDBMetadataStore(copy / "metadata") as store:
        meta = MetadataClient(store)
        for bookie in bookie_dirs(copy):
            # The copy's bookies claim their ids from the copy's directories (the claim
            # names the directory that chose the id: cluster.py _owner).
            try:
                holder, version = store.get(f"{CLAIMS}/{bookie.name}")
            except NoNodeError:
                pass
            else:
                moved = holder.decode().replace(old_root, new_root, 1).encode()
                store.set(f"{CLAIMS}/{bookie.name}", moved, version)
            stored = meta.read_cookie(bookie.name)
            if stored is not None:
                data, version = stored
                meta.write_cookie(bookie.name, relocate_cookie(data, old_root, new_root), version)
            for sub in COOKIE_SUBDIRS:
                cookie = bookie / sub / "COOKIE"
                if cookie.is_file():
                    cookie.write_bytes(relocate_cookie(cookie.read_bytes(), old_root, new_root))


def copy_cluster(data_dir: Path, target: Path) -> None:
    """Copy ``data_dir``'s metadata and bookies to ``target`` under shared locks."""
    from embedlog.metadata.readonly import copy_locked

    sources = {data_dir / "metadata": target / "metadata"}
    sources.update({b: target / b.name for b in bookie_dirs(data_dir)})
    locked = [data_dir / "metadata", *(b / "index" for b in bookie_dirs(data_dir))]
    target.mkdir(parents=True)
    try:
        copy_locked(sources, locked)
    except DirLockedError as exc:
        raise ClusterInUseError(
            f"{exc.path} is in use by {exc.holder}: stop that cluster first (a read-only look "
            "at --data-dir copies it), or reach it through its --metadata-uri"
        ) from None


@contextlib.contextmanager
def booted_copy(data_dir: Path) -> Iterator[LocalCluster]:
    """A LocalCluster booted from a private copy of ``data_dir`` (see the module docstring)."""
    from embedlog.cluster import LocalCluster

    with tempfile.TemporaryDirectory(prefix="embedlog-snapshot-") as tmp:
        copy = Path(tmp) / "cluster"
        copy_cluster(data_dir, copy)
        _relocate_cookies(copy, str(data_dir.resolve()))
        # num_bookies=0: boot exactly the bookies the directory holds, add none. No repair
        # and no garbage collection: the copy shows the bookies as they are.
        with LocalCluster(0, copy, run_repair=False, gc_interval=0) as cluster:
            yield cluster
        shutil.rmtree(copy, ignore_errors=True)


__all__ = ["ClusterInUseError", "bookie_dirs", "booted_copy", "copy_cluster", "relocate_cookie"]
