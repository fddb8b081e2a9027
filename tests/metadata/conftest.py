"""Fixtures for the metadata store tests: one ``store`` per implementation."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# zkserver lives in tests/; make it importable however pytest was invoked
# (tests/ has no __init__.py, and --import-mode=importlib adds nothing to sys.path).
_TESTS = str(Path(__file__).resolve().parents[1])
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

from zkserver import zk_server, zk_uri  # noqa: E402

from embedlog.metadata.store import MetadataStore  # noqa: E402
from embedlog.metadata.uri import open_store  # noqa: E402

__all__ = ["zk_server", "zk_uri"]

STORE_KINDS = ["memory", "leveldb", "zookeeper"]


@pytest.fixture(params=STORE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[MetadataStore]:
    if store_kind == "memory":
        uri: str | None = "memory://"
    elif store_kind == "leveldb":
        uri = None
    else:
        uri = request.getfixturevalue("zk_uri")
    s = open_store(uri, tmp_path)
    try:
        yield s
    finally:
        s.close()
