"""A durable append (the journal's group): one system call where the system has one, and
the same bytes and the same durability as a write followed by ``sync()`` where it has not."""

from __future__ import annotations

import errno
import os
from typing import Any

import pytest

from embedlog.bookie import files
from embedlog.bookie.files import AppendFile


class Calls:
    """Counts the file system calls of ``files`` (wrapping the real ones)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, refuse_dsync: bool = False) -> None:
        self.counts: dict[str, int] = {}
        for name in ("pwritev", "writev", "fsync", "write"):
            monkeypatch.setattr(files.os, name, self._counting(name, getattr(os, name)))
        if refuse_dsync:

            def refused(*_args: Any) -> int:
                self.counts["pwritev"] = self.counts.get("pwritev", 0) + 1
                raise OSError(errno.EOPNOTSUPP, "Operation not supported")

            monkeypatch.setattr(files.os, "pwritev", refused)

    def _counting(self, name: str, real: Any) -> Any:
        def call(*args: Any) -> Any:
            self.counts[name] = self.counts.get(name, 0) + 1
            return real(*args)

        return call


needs_dsync = pytest.mark.skipif(not files._DSYNC, reason="no pwritev2 with RWF_DSYNC here")


@needs_dsync
def test_a_durable_append_is_one_system_call(tmp_path, monkeypatch):
    f = AppendFile(tmp_path / "j")
    f.append_parts([b"first"], durable=True)  # a new file: its directory is fsync'd once
    calls = Calls(monkeypatch)
    parts = [b"a" * 100, b"b" * 924]
    assert f.append_parts(parts, durable=True) == 5
    assert calls.counts == {"pwritev": 1}  # no writev, no fsync: one GIL release
    assert f.synced == f.size == 5 + 1024
    assert f.pread(0, f.size) == b"first" + b"".join(parts)
    f.close()
    assert (tmp_path / "j").read_bytes() == b"first" + b"".join(parts)


def test_without_the_flag_a_durable_append_is_a_write_and_an_fsync(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "_DSYNC", getattr(os, "RWF_DSYNC", 1))
    f = AppendFile(tmp_path / "j")
    f.append_parts([b"first"])
    f.sync()
    calls = Calls(monkeypatch, refuse_dsync=True)
    f.append_parts([b"x" * 10, b"y"], durable=True)
    # Refused once (a file system without it): then writev + fsync, and never tried again.
    assert calls.counts == {"pwritev": 1, "writev": 1, "fsync": 1}
    assert files._DSYNC == 0
    f.append_parts([b"z"], durable=True)
    assert calls.counts == {"pwritev": 1, "writev": 2, "fsync": 2}
    assert f.synced == f.size == 17
    assert f.pread(0, 17) == b"first" + b"x" * 10 + b"yz"


def test_a_plain_append_is_not_durable_until_sync(tmp_path, monkeypatch):
    f = AppendFile(tmp_path / "j")
    f.append_parts([b"kept"], durable=True)
    calls = Calls(monkeypatch)
    f.append_parts([b"lost"])
    assert calls.counts == {"writev": 1}
    assert f.synced == 4 and f.size == 8
    f.crash()  # a power cut: what no sync covered is gone
    assert (tmp_path / "j").read_bytes() == b"kept"


@needs_dsync
def test_a_short_durable_write_writes_the_rest_and_fsyncs(tmp_path, monkeypatch):
    f = AppendFile(tmp_path / "j")
    f.append_parts([b"0"], durable=True)
    real = os.pwritev
    calls = Calls(monkeypatch)

    def short(fd: int, parts: list[bytes], offset: int, flags: int) -> int:
        calls.counts["pwritev"] = calls.counts.get("pwritev", 0) + 1
        return real(fd, [b"".join(parts)[:3]], offset, flags)  # the disk took three bytes

    monkeypatch.setattr(files.os, "pwritev", short)
    f.append_parts([b"abc", b"defg"], durable=True)
    assert calls.counts == {"pwritev": 1, "write": 1, "fsync": 1}
    assert f.synced == f.size == 8
    assert f.pread(0, 8) == b"0abcdefg"


@needs_dsync
def test_a_durable_append_after_a_plain_one_fsyncs_the_whole_file(tmp_path, monkeypatch):
    """One durable write covers its own bytes only: after a plain append (not yet
    durable) the durable one is a write and an fsync, so that ``synced`` never counts
    bytes no sync covered."""
    f = AppendFile(tmp_path / "j")
    f.append_parts([b"head"], durable=True)
    f.append_parts([b"plain"])
    calls = Calls(monkeypatch)
    f.append_parts([b"tail"], durable=True)
    assert calls.counts == {"writev": 1, "fsync": 1}
    assert f.synced == f.size == 13
    calls.counts.clear()
    f.append_parts([b"next"], durable=True)  # everything before is durable again
    assert calls.counts == {"pwritev": 1}


def test_a_sync_half_that_fails_after_the_data_went_in_is_not_taken_for_a_refusal(
    tmp_path, monkeypatch
):
    """EINVAL from a file system without fsync comes after the write: the group is in the
    file, so it is not written again, and the append fails (nothing durable moved)."""
    monkeypatch.setattr(files, "_DSYNC", getattr(os, "RWF_DSYNC", 2))
    f = AppendFile(tmp_path / "j")
    f.append_parts([b"x"])
    f.sync()

    def wrote_then_einval(fd: int, parts: list[bytes], offset: int, flags: int) -> int:
        os.write(fd, b"".join(parts))
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(files.os, "pwritev", wrote_then_einval)
    with pytest.raises(OSError):
        f.append_parts([b"GROUP"], durable=True)
    assert (tmp_path / "j").read_bytes() == b"xGROUP"
    assert f.synced == 1 and f.size == 6  # the size read back from the file
    assert files._DSYNC  # not given up on: the flag was not what failed


def test_a_file_found_at_open_gets_its_directory_entry_fsynced_once(tmp_path, monkeypatch):
    """A process may have created the file and died before its first sync: its directory
    entry is made durable at the first sync after this open, as for a new file."""
    (tmp_path / "j").write_bytes(b"")
    f = AppendFile(tmp_path / "j")
    opened: list[str] = []
    real_open = os.open

    def counting_open(path: Any, flags: int, *args: Any) -> int:
        opened.append(str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(files.os, "open", counting_open)
    f.append_parts([b"a"], durable=True)
    f.append_parts([b"b"], durable=True)
    f.sync()
    assert opened == [str(tmp_path)]  # the directory, once
