"""An exclusive lock on a directory, for the lifetime of what keeps its data there.

LevelDB's own LOCK cannot be trusted with this: it is a POSIX record lock, and
POSIX drops every such lock a process holds on a file when the process closes
*any* descriptor of that file. LevelDB does exactly that when it refuses a
second open of a database the process already has open, so one refused open
silently unlocked the database for every other process.

``DirLock`` is taken before LevelDB is touched and held until ``release``:

* within the process, a registry of locked directories (by device and inode, so
  another path to the same directory counts) refuses a second holder without
  opening anything;
* between processes, ``flock`` on ``LOCK_FILE`` in the directory: a BSD lock
  belongs to the open file description, so no other descriptor's close drops it,
  and the kernel drops it when the holder dies. The holder writes who it is into
  the file, for the refusal message of the next one.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import json
import os
import socket
import sys
import threading
import time
import weakref
from pathlib import Path

LOCK_FILE = "embedlog.lock"

_registry_lock = threading.Lock()
_held: dict[tuple[int, int], str] = {}  # (st_dev, st_ino) -> who holds it in this process


class DirLockedError(Exception):
    """The directory is locked: by this process (``in_this_process``) or another one."""

    def __init__(self, path: Path, holder: str, *, in_this_process: bool) -> None:
        where = "this process" if in_this_process else "another process"
        super().__init__(f"{path} is locked by {where}: {holder}")
        self.path = path
        self.holder = holder
        self.in_this_process = in_this_process


class DirLock:
    """Holds ``directory`` exclusively until ``release()`` (or until it is collected)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.path = Path(directory)
        st = os.stat(self.path)
        self._key = (st.st_dev, st.st_ino)
        me = _describe_self()
        with _registry_lock:
            holder = _held.get(self._key)
            if holder is not None:
                raise DirLockedError(self.path, holder, in_this_process=True)
            fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)  # a BSD lock: closing our descriptor leaves the holder's alone
                if exc.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                    raise
                raise DirLockedError(
                    self.path, _read_holder(self.path / LOCK_FILE), in_this_process=False
                ) from None
            _held[self._key] = me
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(_self_record()).encode(), 0)
        except OSError:
            pass  # who holds it is only for messages; a full disk must not stop the open
        self._finalizer = weakref.finalize(self, _unlock, fd, self._key)

    def release(self) -> None:
        """Unlock (idempotent)."""
        self._finalizer()

    @property
    def held(self) -> bool:
        return self._finalizer.alive


def _unlock(fd: int, key: tuple[int, int]) -> None:
    with _registry_lock:
        _held.pop(key, None)
        os.close(fd)  # drops the flock


def _self_record() -> dict[str, object]:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": " ".join([sys.executable, *sys.argv])[:300],
        "since": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def _describe_self() -> str:
    return (
        f"pid {os.getpid()}, opened {_call_site()} in thread "
        f"{threading.current_thread().name!r} at {time.strftime('%H:%M:%S')}"
    )


_PACKAGE = os.path.realpath(os.path.dirname(__file__)) + os.sep


@functools.lru_cache(maxsize=512)
def _outside_embedlog(filename: str) -> bool:
    return not os.path.realpath(filename).startswith(_PACKAGE)


def _call_site() -> str:
    """The innermost caller outside embedlog: where the user's code opened the directory.

    Walks the frames themselves (no source lines read, each file name resolved once):
    every bookie boot takes a lock, and the simulator boots thousands."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if _outside_embedlog(code.co_filename):
            return f"at {code.co_filename}:{frame.f_lineno} ({code.co_name})"
        frame = frame.f_back  # type: ignore[assignment]
    return "inside embedlog"


def _read_holder(lock_file: Path) -> str:
    try:
        rec = json.loads(lock_file.read_text())
        return f"pid {rec['pid']} on {rec['host']} since {rec['since']} (command: {rec['command']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that did not say who it is"


__all__ = ["LOCK_FILE", "DirLock", "DirLockedError"]
