"""open_store: which store a metadata URI names."""

from __future__ import annotations

from pathlib import Path

import pytest

from embedlog.metadata.leveldb_store import LevelDBMetadataStore
from embedlog.metadata.memory import MemoryMetadataStore
from embedlog.metadata.uri import open_store, parse_zk_uri
from embedlog.metadata.zookeeper_store import ZooKeeperMetadataStore


def test_none_is_leveldb_under_data_dir(tmp_path: Path) -> None:
    store = open_store(None, tmp_path)
    try:
        assert isinstance(store, LevelDBMetadataStore)
        assert store.path == tmp_path / "metadata"
        assert (tmp_path / "metadata").is_dir()
    finally:
        store.close()


def test_memory(tmp_path: Path) -> None:
    store = open_store("memory://", tmp_path)
    assert isinstance(store, MemoryMetadataStore)
    assert not (tmp_path / "metadata").exists()


def test_zookeeper(tmp_path: Path, zk_uri: str) -> None:
    store = open_store(zk_uri, tmp_path)
    try:
        assert isinstance(store, ZooKeeperMetadataStore)
        assert zk_uri.endswith(store.chroot)
        store.create("/x", b"1")
    finally:
        store.close()
    # The same URI reaches the same tree from another client.
    again = open_store(zk_uri, tmp_path)
    try:
        assert again.get("/x") == (b"1", 0)
    finally:
        again.close()


def test_zookeeper_chroots_are_separate(tmp_path: Path, zk_server) -> None:  # type: ignore[no-untyped-def]
    a = open_store(zk_server.uri("/one/nested"), tmp_path)
    b = open_store(zk_server.uri("/two"), tmp_path)
    try:
        a.create("/n", b"a")
        assert not b.exists("/n")
        assert b.children("/") == []
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize(
    ("uri", "hosts", "chroot"),
    [
        ("zk://127.0.0.1:2181/embedlog", "127.0.0.1:2181", "/embedlog"),
        ("zk://h1:2181,h2:2182,h3:2183/a/b/", "h1:2181,h2:2182,h3:2183", "/a/b"),
        ("zk://zk.example.com:2181", "zk.example.com:2181", ""),
        ("zk://zk:2181/", "zk:2181", "/"),
    ],
)
def test_parse_zk_uri(uri: str, hosts: str, chroot: str) -> None:
    assert parse_zk_uri(uri) == (hosts, chroot)


@pytest.mark.parametrize(
    "uri",
    [
        "",
        "memory",
        "memory:///x",
        "leveldb:///tmp/x",
        "file:///tmp/x",
        "/tmp/metadata",
        "zk://",
        "zk:///chroot",
        "zk://host/chroot",
        "zk://host:notaport/chroot",
        "zk://host:99999/chroot",
        "zk://h1:2181,/chroot",
        "zk://h:2181/a//b",
        "zk://h:2181/a?x=1",
    ],
)
def test_bad_uris(tmp_path: Path, uri: str) -> None:
    with pytest.raises(ValueError) as info:
        open_store(uri, tmp_path)
    message = str(info.value)
    assert repr(uri) in message
    assert "memory://" in message and "zk://host:port" in message
