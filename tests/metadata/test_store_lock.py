"""The embedded metadata store's own lock: one holder at a time, whatever is refused meanwhile.

A refused second open inside the process used to drop LevelDB's lock (a POSIX record
lock dies with any descriptor of its file), so another process could open the store of
a running cluster and the ledgers created afterwards went missing from its metadata.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import embedlog
from embedlog import LocalCluster
from embedlog.dirlock import LOCK_FILE, DirLock, DirLockedError
from embedlog.errors import MetadataError
from embedlog.metadata.leveldb_store import LevelDBMetadataStore, MetadataStoreInUseError

_ROOT = str(Path(embedlog.__file__).resolve().parents[1])


def python(code: str, *, stdin: bool = False) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=_ROOT)
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def other_process_opens(store_dir: Path) -> str:
    """What another process gets when it opens the store: "opened" or the refusal."""
    child = python(
        f"""
        from embedlog.metadata.leveldb_store import LevelDBMetadataStore, MetadataStoreInUseError
        try:
            LevelDBMetadataStore({str(store_dir)!r}).close()
        except MetadataStoreInUseError as exc:
            print("refused:", exc)
        else:
            print("opened")
        """
    )
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    return out.strip()


def test_a_refused_second_open_keeps_the_running_clusters_store_locked(tmp_path: Path) -> None:
    data_dir = tmp_path / "cluster"
    store_dir = data_dir / "metadata"
    with LocalCluster(3, data_dir) as cluster:
        client = cluster.client()
        first = client.create_ledger(3, 3, 2)
        first.add(b"before")
        first.close()

        with pytest.raises(MetadataStoreInUseError) as second_cluster:
            LocalCluster(3, data_dir).start()
        message = str(second_cluster.value)
        assert str(store_dir) in message and "already open in this process" in message
        assert f"pid {os.getpid()}" in message
        assert "test_store_lock.py" in message  # where the holder opened it
        with pytest.raises(MetadataStoreInUseError, match="already open in this process"):
            embedlog.connect(None, data_dir=data_dir)

        refusal = other_process_opens(store_dir)
        assert refusal.startswith("refused:"), refusal
        assert "in use by another process" in refusal and f"pid {os.getpid()}" in refusal

        # The first cluster keeps working, and its metadata is its own.
        ids = []
        for i in range(50):
            wh = client.create_ledger(3, 3, 2)
            wh.add(b"ledger %d" % i)
            wh.close()
            ids.append(wh.ledger_id)
        assert set(ids) <= set(client.list_ledgers())
        assert other_process_opens(store_dir).startswith("refused:")

    assert other_process_opens(store_dir) == "opened"  # released with the cluster
    with LocalCluster(3, data_dir) as again:
        client = again.client()
        assert set(client.list_ledgers()) == {first.ledger_id, *ids}
        for i, lid in enumerate(ids):
            assert client.open_ledger(lid).read(0, 0)[0].data == b"ledger %d" % i


def test_another_process_holding_it_is_named_and_keeps_it(tmp_path: Path) -> None:
    store_dir = tmp_path / "md"
    holder = python(
        f"""
        import sys
        from embedlog.metadata.leveldb_store import LevelDBMetadataStore
        store = LevelDBMetadataStore({str(store_dir)!r})
        print("open", flush=True)
        sys.stdin.readline()
        store.create("/written-after", b"")
        store.close()
        """,
        stdin=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "open"
        for _ in range(2):  # refused twice here: the holder's lock stays with the holder
            with pytest.raises(MetadataStoreInUseError) as info:
                LevelDBMetadataStore(store_dir)
            assert f"pid {holder.pid}" in str(info.value)
            assert "ZooKeeper metadata_uri" in str(info.value)
        assert other_process_opens(store_dir).startswith("refused:")
    finally:
        _, err = holder.communicate("\n", timeout=60)
    assert holder.returncode == 0, err
    with LevelDBMetadataStore(store_dir) as store:
        assert store.exists("/written-after")


def test_one_of_many_threads_opens_it(tmp_path: Path) -> None:
    store_dir = tmp_path / "md"
    store_dir.mkdir()
    opened: list[LevelDBMetadataStore] = []
    refused: list[MetadataStoreInUseError] = []
    start = threading.Barrier(8)

    def race() -> None:
        start.wait()
        try:
            opened.append(LevelDBMetadataStore(store_dir))
        except MetadataStoreInUseError as exc:
            refused.append(exc)

    threads = [threading.Thread(target=race) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (len(opened), len(refused)) == (1, 7)
    opened[0].create("/x", b"1")
    assert other_process_opens(store_dir).startswith("refused:")
    opened[0].close()
    with LevelDBMetadataStore(store_dir) as store:
        assert store.get("/x")[0] == b"1"


def test_another_path_to_the_same_directory_is_the_same_store(tmp_path: Path) -> None:
    (tmp_path / "md").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "md")
    with LevelDBMetadataStore(tmp_path / "md"), pytest.raises(MetadataStoreInUseError):
        LevelDBMetadataStore(tmp_path / "alias")


def test_a_failed_open_lets_go_of_the_lock(tmp_path: Path) -> None:
    store_dir = tmp_path / "md"
    LevelDBMetadataStore(store_dir).close()
    (store_dir / "CURRENT").write_text("MANIFEST-999999\n")  # names a manifest that is gone
    for _ in range(2):  # the second attempt meets the same damage, not a leftover lock
        with pytest.raises(MetadataError, match="cannot open metadata store at") as info:
            LevelDBMetadataStore(store_dir)
        assert not isinstance(info.value, MetadataStoreInUseError), info.value


def test_dir_lock_release_and_collection(tmp_path: Path) -> None:
    lock = DirLock(tmp_path)
    assert (tmp_path / LOCK_FILE).exists()
    with pytest.raises(DirLockedError) as info:
        DirLock(tmp_path)
    assert info.value.in_this_process and info.value.path == tmp_path
    lock.release()
    lock.release()  # idempotent
    assert not lock.held
    again = DirLock(tmp_path)
    del again  # a lock nobody holds any more lets go of the directory
    DirLock(tmp_path).release()
