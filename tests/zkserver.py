"""A real, throwaway ZooKeeper server for tests, as a pytest plugin.

Fixtures:

* ``zk_server`` (session scope): a standalone ZooKeeper on 127.0.0.1 and a free
  port, data in a temporary directory, killed at the end of the test session.
  It has ``.hosts`` ("127.0.0.1:PORT"), ``.port``, ``.uri(chroot)`` and ``.ruok()``.
* ``zk_uri`` (function scope): ``zk://127.0.0.1:PORT/<unique chroot>``, so every
  test gets an empty tree on the shared server.

Use it with ``pytest_plugins = ["zkserver"]`` in tests/conftest.py (tests/ is on
sys.path there), or ``from zkserver import zk_server, zk_uri``.

ZooKeeper comes from Debian's ``zookeeper`` package (``apt-get install -y
zookeeper``: jars in /usr/share/java). ``ZOOKEEPER_HOME`` (an Apache tarball,
jars in lib/) or ``ZOOKEEPER_CLASSPATH`` override that. When no ZooKeeper is
found the fixture fails rather than skips: CI installs it, and a silently
skipped suite would hide the ZooKeeper store's bugs.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

# The server itself lives in the library (``embedlog sandbox`` uses it too); these names
# stay importable from here for existing tests.
from embedlog.metadata.zkserver import (
    INSTALL_HINT,
    ZooKeeperNotInstalled,
    ZooKeeperServer,
    find_classpath,
    find_java,
    four_letter,
    free_port,
    running_zookeeper,
)

__all__ = [
    "INSTALL_HINT",
    "ZooKeeperNotInstalled",
    "ZooKeeperServer",
    "find_classpath",
    "find_java",
    "four_letter",
    "free_port",
    "running_zookeeper",
    "zk_server",
    "zk_uri",
]


@pytest.fixture(scope="session")
def zk_server() -> Iterator[ZooKeeperServer]:
    try:
        find_classpath()
        find_java()
    except ZooKeeperNotInstalled as exc:
        missing = str(exc)
    else:
        missing = ""
    if missing:
        pytest.fail(missing, pytrace=False)
    with running_zookeeper() as server:
        yield server


@pytest.fixture
def zk_uri(zk_server: ZooKeeperServer) -> str:
    return zk_server.uri(f"/test-{uuid.uuid4().hex[:12]}")
