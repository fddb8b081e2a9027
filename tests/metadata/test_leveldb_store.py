"""What only the embedded LevelDB store has: a disk that outlives the process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from embedlog.errors import MetadataError
from embedlog.metadata.client import MetadataClient
from embedlog.metadata.leveldb_store import LevelDBMetadataStore, MetadataStoreInUseError


def run_child(code: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_data_and_versions_survive_reopen(tmp_path: Path) -> None:
    with LevelDBMetadataStore(tmp_path / "md") as store:
        store.create("/ledgers/00000000000000000001", b"v0")
        store.set("/ledgers/00000000000000000001", b"v1", 0)
        MetadataClient(store).next_ledger_id()
    with LevelDBMetadataStore(tmp_path / "md") as store:
        assert store.get("/ledgers/00000000000000000001") == (b"v1", 1)
        assert MetadataClient(store).next_ledger_id() == 1


def test_clean_close_removes_ephemerals(tmp_path: Path) -> None:
    store = LevelDBMetadataStore(tmp_path / "md")
    session = store.session()
    session.create("/bookies/available/b1", b"", ephemeral=True)
    store.create("/own-ephemeral", b"", ephemeral=True)
    store.close()
    session.close()  # after the store: harmless
    with LevelDBMetadataStore(tmp_path / "md") as store:
        assert store.children("/bookies/available") == []
        assert not store.exists("/own-ephemeral")


def test_ephemerals_of_a_crashed_process_are_swept(tmp_path: Path) -> None:
    child = run_child(
        f"""
        import os
        from embedlog.metadata.leveldb_store import LevelDBMetadataStore
        store = LevelDBMetadataStore({str(tmp_path / "md")!r})
        store.session().create("/bookies/available/b1", b"{{}}", ephemeral=True)
        store.create("/ledgers/00000000000000000000", b"kept")
        os._exit(0)  # a crash: no close, no session end
        """
    )
    _, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    with LevelDBMetadataStore(tmp_path / "md") as store:
        assert store.children("/bookies/available") == []
        assert store.get("/ledgers/00000000000000000000") == (b"kept", 0)


def test_in_use_by_another_process(tmp_path: Path) -> None:
    child = run_child(
        f"""
        import sys
        from embedlog.metadata.leveldb_store import LevelDBMetadataStore
        store = LevelDBMetadataStore({str(tmp_path / "md")!r})
        print("open", flush=True)
        sys.stdin.readline()
        store.close()
        """
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "open"
        with pytest.raises(MetadataStoreInUseError) as info:
            LevelDBMetadataStore(tmp_path / "md")
        message = str(info.value)
        assert "in use by another process" in message
        assert str(tmp_path / "md") in message
        assert "ZooKeeper metadata_uri" in message
    finally:
        child.communicate("\n", timeout=60)
    LevelDBMetadataStore(tmp_path / "md").close()  # free again once the other process is gone


def test_in_use_within_this_process(tmp_path: Path) -> None:
    with LevelDBMetadataStore(tmp_path / "md"), pytest.raises(MetadataStoreInUseError):
        LevelDBMetadataStore(tmp_path / "md")


def test_unusable_directory(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"not a directory")
    with pytest.raises(MetadataError, match="metadata store at"):
        LevelDBMetadataStore(blocker)
    with pytest.raises(MetadataError, match="metadata store at"):
        LevelDBMetadataStore(blocker / "below")


def test_children_skip_large_subtrees(tmp_path: Path) -> None:
    with LevelDBMetadataStore(tmp_path / "md") as store:
        for i in range(200):
            store.create(f"/big/a/{i:05d}", b"")
        store.create("/big/b", b"")
        store.create("/big/c/x", b"")
        assert store.children("/big") == ["a", "b", "c"]
        assert len(store.children("/big/a")) == 200


def test_close_is_idempotent(tmp_path: Path) -> None:
    store = LevelDBMetadataStore(tmp_path / "md")
    store.close()
    store.close()
    assert store.closed


def test_closing_while_other_threads_read_never_crashes(tmp_path: Path) -> None:
    """A read under way when the store closes (a client thread polling metadata while its
    cluster stops) finishes or is refused; LevelDB closed under it crashed the process.
    Run in a child: a crash there is a failure here, not the end of the test run."""
    child = run_child(
        f"""
        import threading
        from embedlog.metadata.leveldb_store import LevelDBMetadataStore

        for round in range(30):
            store = LevelDBMetadataStore({str(tmp_path)!r} + f"/md{{round}}")
            for i in range(50):
                store.create(f"/ledgers/{{i:020d}}", b"x" * 100)
            refused = []

            def read() -> None:
                while True:
                    try:
                        store.get("/ledgers/00000000000000000007")
                        store.children("/ledgers")
                    except RuntimeError:
                        refused.append(1)
                        return

            threads = [threading.Thread(target=read) for _ in range(4)]
            for t in threads:
                t.start()
            store.close()
            for t in threads:
                t.join()
            assert len(refused) == 4
        print("ok")
        """
    )
    out, err = child.communicate(timeout=300)
    assert child.returncode == 0 and out.strip() == "ok", (child.returncode, err[-2000:])
