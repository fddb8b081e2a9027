"""A bookie whose metadata session expires while it serves registers again
(embedlog/bookie/registration.py); one that crashed or stopped does not."""

from __future__ import annotations

import time
from collections.abc import Callable

from embedlog import LocalCluster
from embedlog.bookie.base import BookieState
from embedlog.metadata.zookeeper_store import ZooKeeperSession, expire_session


def _until(cond: Callable[[], bool]) -> None:
    while not cond():  # no deadline: pytest's own timeout applies
        time.sleep(0.02)


def _expire(cluster: LocalCluster, bid: str) -> None:
    """The session of a bookie that keeps serving expires, as after a pause longer than
    ZooKeeper's session timeout: its registration vanishes at once."""
    session = cluster._sessions[bid]
    if isinstance(session, ZooKeeperSession):
        hosts, sid = session.hosts, session.session_id
        assert sid is not None
        expire_session(hosts, sid)  # the server ends it; the bookie's client reconnects
    else:
        session.expire()  # type: ignore[attr-defined]


def test_an_expired_session_is_followed_by_a_new_registration(make_cluster) -> None:
    cluster = make_cluster(3)
    bookie = cluster.bookie("bookie-2")
    _expire(cluster, "bookie-2")
    _until(lambda: bookie.registration.renewals == 1)
    assert cluster.metadata.writable_bookies() == ["bookie-1", "bookie-2", "bookie-3"]
    assert bookie.status()["registered_again"] == 1
    # Placement finds it again: an ensemble of all three bookies.
    wh = cluster.client("c").create_ledger(3, 3, 2)
    wh.add(b"placed")
    assert "bookie-2" in wh.metadata.ensembles[0]


def test_a_readonly_bookie_registers_again_as_readonly(make_cluster) -> None:
    cluster = make_cluster(3)
    cluster.stop_bookie("bookie-3")
    cluster.start_bookie("bookie-3", readonly=True)
    bookie = cluster.bookie("bookie-3")
    assert cluster.metadata.readonly_bookies() == ["bookie-3"]
    _expire(cluster, "bookie-3")
    _until(lambda: bookie.registration.renewals == 1)
    assert cluster.metadata.readonly_bookies() == ["bookie-3"]
    assert cluster.metadata.writable_bookies() == ["bookie-1", "bookie-2"]


def test_a_crashed_bookie_stays_unregistered(make_cluster) -> None:
    """A crash ends the session too (abruptly, as ZooKeeper times a dead process out): the
    dead bookie must not come back into placement."""
    cluster = make_cluster(3)
    bookie = cluster.bookie("bookie-1")
    cluster.crash_bookie("bookie-1")
    assert bookie.state is BookieState.CRASHED
    # Give a registration that should not happen every chance: another bookie's renewal
    # goes through the same loop after it.
    other = cluster.bookie("bookie-2")
    _expire(cluster, "bookie-2")
    _until(lambda: other.registration.renewals == 1)
    assert bookie.registration.renewals == 0
    assert cluster.metadata.writable_bookies() == ["bookie-2", "bookie-3"]


def test_on_zookeeper(make_cluster, zk_uri: str) -> None:
    """A real ZooKeeper session expiry: the server ends the session, kazoo connects with
    a new one, and the bookie registers through it."""
    cluster = make_cluster(3, metadata_uri=zk_uri)
    bookie = cluster.bookie("bookie-1")
    _expire(cluster, "bookie-1")
    _until(lambda: bookie.registration.renewals == 1)
    assert cluster.metadata.writable_bookies() == ["bookie-1", "bookie-2", "bookie-3"]
    # The new registration belongs to the new session: a crash still removes it.
    cluster.crash_bookie("bookie-1")
    assert cluster.metadata.writable_bookies() == ["bookie-2", "bookie-3"]
