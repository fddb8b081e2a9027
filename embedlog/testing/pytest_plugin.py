"""embedlog's pytest plugin: real in-process clusters as fixtures.

Loaded by pytest whenever embedlog is installed (the ``pytest11`` entry point
``embedlog``); ``-p no:embedlog`` turns it off. Fixtures:

* ``embedlog_cluster``: a started ``LocalCluster`` of 3 in-process bookies under the
  test's ``tmp_path``. ``@pytest.mark.embedlog(bookies=5, journal_write_data=False,
  transport="tcp", flush_interval=0.01, ...)`` sets its shape: ``bookies`` is the number
  of bookies, every other keyword goes to ``LocalCluster``.
* ``embedlog_cluster_factory``: call it for more clusters, of any shape, in one test:
  ``embedlog_cluster_factory(5, journal_write_data=False)``.
* ``embedlog_client``: a ``Client`` of ``embedlog_cluster`` named ``"client"``.
* ``embedlog_zookeeper`` (session scope): a real ZooKeeper server from Debian's
  ``zookeeper`` package on 127.0.0.1 and a free port; ``.fresh_uri()`` gives a
  ``zk://`` URI with an empty chroot of its own for each call. Fails, naming the
  install command, when ZooKeeper is not installed.

Every cluster a fixture started is stopped when the test ends, passed or failed.
embedlog itself is imported only when a test asks for one of these fixtures, so the
plugin costs nothing in projects that have embedlog installed but do not use it.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from embedlog.client import Client
    from embedlog.cluster import LocalCluster
    from embedlog.metadata.zkserver import ZooKeeperServer

MARKER = "embedlog"
DEFAULT_BOOKIES = 3


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(bookies=3, **settings): the shape of the embedlog_cluster fixture's "
        "cluster: the number of bookies and any LocalCluster keyword (transport='tcp', "
        "journal_write_data=False, flush_interval=0.01, ...)",
    )


class ClusterFactory:
    """Starts clusters under one directory and stops every one of them at the end."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._numbers = itertools.count()
        self.clusters: list[LocalCluster] = []

    def __call__(self, num_bookies: int = DEFAULT_BOOKIES, **settings: Any) -> LocalCluster:
        from embedlog.cluster import LocalCluster

        settings.setdefault("data_dir", self._root / f"embedlog-cluster-{next(self._numbers)}")
        cluster = LocalCluster(num_bookies, **settings)
        # Registered before start(): a cluster that fails half way through its start still
        # has bookies and a runtime to stop.
        self.clusters.append(cluster)
        cluster.start()
        return cluster

    def stop_all(self) -> None:
        errors: list[BaseException] = []
        while self.clusters:
            try:
                self.clusters.pop().stop()
            except Exception as exc:  # stop the others first, then report
                errors.append(exc)
        if errors:
            raise errors[0]


@pytest.fixture
def embedlog_cluster_factory(tmp_path: Path) -> Iterator[ClusterFactory]:
    """``factory(num_bookies=3, **LocalCluster_keywords) -> LocalCluster``, started; every
    cluster it made is stopped at the end of the test."""
    factory = ClusterFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.stop_all()


def accepted_settings() -> frozenset[str]:
    """What ``@pytest.mark.embedlog(...)`` takes: ``bookies``, LocalCluster's own keywords
    and the bookie settings (each bookie's id, directory and address are the cluster's)."""
    import inspect

    import attrs

    from embedlog.bookie.config import BookieConfig
    from embedlog.cluster import LocalCluster

    params = inspect.signature(LocalCluster.__init__).parameters.values()
    local = {p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}
    bookie = {a.name for a in attrs.fields(BookieConfig)} - {"bookie_id", "data_dir", "address"}
    return frozenset({"bookies", *local, *bookie})


def known_settings() -> list[str]:
    """The settings an error names: the accepted ones less the ``unsafe_*`` switches
    (embedlog's own tests of what BP-46 prevents use them; no application should)."""
    return sorted(k for k in accepted_settings() if not k.startswith("unsafe_"))


def _unknown(names: list[str]) -> str:
    import difflib

    known = known_settings()
    said = []
    for name in names:
        close = difflib.get_close_matches(name, known, n=1)
        said.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return f"unknown setting {', '.join(said)}; known: {', '.join(known)}"


def marker_settings(marker: pytest.Mark | None) -> tuple[int, dict[str, Any]]:
    """The number of bookies and the LocalCluster keywords an ``embedlog`` marker asks for."""
    if marker is None:
        return DEFAULT_BOOKIES, {}
    if marker.args:
        raise ValueError(
            f"@pytest.mark.{MARKER} takes keywords only, e.g. "
            f"@pytest.mark.{MARKER}(bookies=5, journal_write_data=False); got {marker.args!r}"
        )
    settings = dict(marker.kwargs)
    if settings.pop("data_dir", None) is not None:
        raise ValueError(
            f"@pytest.mark.{MARKER}: data_dir is the fixture's (under tmp_path); "
            "use embedlog_cluster_factory(data_dir=...) for a directory of your own"
        )
    unknown = sorted(set(settings) - accepted_settings())
    if unknown:
        raise ValueError(f"@pytest.mark.{MARKER}: {_unknown(unknown)}")
    bookies = settings.pop("bookies", DEFAULT_BOOKIES)
    if not isinstance(bookies, int) or isinstance(bookies, bool) or bookies < 1:
        raise ValueError(
            f"@pytest.mark.{MARKER}(bookies=...) must be a whole number >= 1, got {bookies!r}"
        )
    return bookies, settings


@pytest.fixture
def embedlog_cluster(
    request: pytest.FixtureRequest, embedlog_cluster_factory: ClusterFactory
) -> LocalCluster:
    """A started in-process cluster (3 bookies unless ``@pytest.mark.embedlog`` says)."""
    try:
        bookies, settings = marker_settings(request.node.get_closest_marker(MARKER))
    except ValueError as exc:
        problem = str(exc)
    else:
        return embedlog_cluster_factory(bookies, **settings)
    # Outside the except: the report is the one line, not the exception it came from.
    pytest.fail(problem, pytrace=False)


@pytest.fixture
def embedlog_client(embedlog_cluster: LocalCluster) -> Client:
    """A client of ``embedlog_cluster``, named ``"client"`` (the name fault injection uses:
    ``embedlog_cluster.network.block("client", bookie_id)``)."""
    return embedlog_cluster.client("client")


class ZooKeeper:
    """A running ZooKeeper server for tests: its address and fresh chroots on it."""

    def __init__(self, server: ZooKeeperServer) -> None:
        self.server = server

    @property
    def hosts(self) -> str:
        """``127.0.0.1:PORT``."""
        return self.server.hosts

    @property
    def port(self) -> int:
        return self.server.port

    def fresh_uri(self) -> str:
        """A ``zk://`` metadata URI under a chroot nobody else uses: an empty cluster."""
        return self.server.uri(f"/embedlog-test-{uuid.uuid4().hex[:12]}")


@pytest.fixture(scope="session")
def embedlog_zookeeper() -> Iterator[ZooKeeper]:
    """A real ZooKeeper server on 127.0.0.1, started once for the session."""
    from embedlog.metadata.zkserver import (
        ZooKeeperNotInstalled,
        find_classpath,
        find_java,
        running_zookeeper,
    )

    try:
        find_classpath()
        find_java()
    except ZooKeeperNotInstalled as exc:
        pytest.fail(f"embedlog_zookeeper: {exc}", pytrace=False)
    with running_zookeeper() as server:
        yield ZooKeeper(server)
