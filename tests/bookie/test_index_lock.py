"""A bookie's index is used by one bookie at a time, and a refused boot does not unlock it.

LevelDB refusing a second open in the process closes a descriptor of its LOCK file,
which drops the process's POSIX lock on it: the first bookie's index was then open to
any other process. The index is locked with embedlog's own lock before LevelDB is touched.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from embedlog.bookie.bookie import Bookie
from embedlog.errors import BookieIOError
from embedlog.wire.codes import StatusCode


def another_process_opens_leveldb(index_dir: Path) -> bool:
    code = f"""
        from embedlog import leveldb as plyvel
        try:
            plyvel.DB({str(index_dir)!r}).close()
        except plyvel.IOError:
            print("locked")
        else:
            print("opened")
        """
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=dict(os.environ),
    ).stdout.strip()
    return out == "opened"


def test_a_second_bookie_on_the_same_disks_is_refused_and_the_first_keeps_its_lock(harness):
    h = harness()
    first = h.boot()
    assert h.add(1, 0, b"kept").status == StatusCode.EOK
    second = Bookie(h.config(), h.meta, h.store.session())
    with pytest.raises(BookieIOError) as info:
        h.run(second.start())
    assert not another_process_opens_leveldb(h.config().index_dir)
    message = str(info.value)
    assert str(h.config().index_dir) in message and "locked by this process" in message
    assert "stop the other one first" in message
    h.bookie = first  # still serving, with its index
    assert h.add(1, 1, b"more").status == StatusCode.EOK
    assert h.read(1, 0).body.endswith(b"kept")
    h.stop()
    assert another_process_opens_leveldb(h.config().index_dir)  # released by the stop
    h.boot()
    assert h.read(1, 1).body.endswith(b"more")


def test_a_crash_releases_the_index(harness):
    h = harness()
    h.boot()
    h.add(2, 0)
    h.crash()
    assert another_process_opens_leveldb(h.config().index_dir)
    h.boot()
    assert h.read(2, 0).status == StatusCode.EOK
