"""A bookie whose metadata session expires while it serves registers again
(embedlog/bookie/registration.py); one that crashed or stopped does not."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from embedlog import LocalCluster
from embedlog.bookie.base import BookieState
from embedlog.errors import MetadataError
from embedlog.metadata.client import AVAILABLE, MetadataClient
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


def _drop_registration(cluster: LocalCluster, bid: str) -> None:
    """What an expiry does to the registration, without telling the bookie yet."""
    cluster._sessions[bid]._end()  # type: ignore[attr-defined]
    assert bid not in cluster.metadata.writable_bookies()


def test_an_expiry_during_the_renewal_brings_one_more(make_cluster, monkeypatch) -> None:
    """The session expires again while the renewal's write is on its way: that write went
    with the old session, so the renewal must not count it."""
    cluster = make_cluster(3)
    bookie = cluster.bookie("bookie-2")
    real = MetadataClient.register_again
    expiries = {"left": 1}

    def register_again(self: MetadataClient, *args: Any, **kw: Any) -> None:
        real(self, *args, **kw)
        if expiries["left"]:
            expiries["left"] -= 1
            _drop_registration(cluster, "bookie-2")
            bookie.registration.refresh()  # the expiry's news, while this write returns

    monkeypatch.setattr(MetadataClient, "register_again", register_again)
    _expire(cluster, "bookie-2")
    _until(lambda: bookie.registration.renewals == 1)
    assert expiries["left"] == 0
    assert cluster.metadata.writable_bookies() == ["bookie-1", "bookie-2", "bookie-3"]


def test_a_registration_held_by_another_session_is_left_alone(make_cluster) -> None:
    """A second process with the bookie's id registered meanwhile: the renewal waits for
    that registration to go instead of deleting it."""
    cluster = make_cluster(3, repair_retry_interval=0.05)
    bookie = cluster.bookie("bookie-2")
    other = cluster._store.session()
    path = f"{AVAILABLE}/bookie-2"
    _drop_registration(cluster, "bookie-2")
    other.create(path, b'{"address": "elsewhere"}', ephemeral=True)
    cluster.runtime.call(bookie.registration.refresh)
    time.sleep(0.3)  # several retries
    assert cluster.metadata.store.get(path)[0] == b'{"address": "elsewhere"}'
    assert bookie.registration.renewals == 0
    other.close()  # the other process goes
    _until(lambda: bookie.registration.renewals == 1)
    assert not cluster._sessions["bookie-2"].held_by_another_session(path)


def test_a_bookie_whose_cookie_changed_stops_registering(make_cluster) -> None:
    """An operator's cookie fix made a new incarnation of the bookie (new disks) while
    this process was cut off: it must not take the registration back."""
    cluster = make_cluster(3, repair_retry_interval=0.05)
    bookie = cluster.bookie("bookie-3")
    data, version = cluster.metadata.read_cookie("bookie-3")
    cluster.metadata.write_cookie("bookie-3", data + b" ", version)
    _drop_registration(cluster, "bookie-3")
    cluster.runtime.call(bookie.registration.refresh)
    task = bookie.registration._task
    assert task is not None
    _until(task.done)
    assert bookie.registration.renewals == 0
    assert cluster.metadata.writable_bookies() == ["bookie-1", "bookie-2"]


def test_a_failed_readonly_change_is_retried(make_cluster, monkeypatch) -> None:
    cluster = make_cluster(3, repair_retry_interval=0.05)
    bookie = cluster.bookie("bookie-1")
    real = MetadataClient.register_bookie
    failures = {"left": 1}

    def register_bookie(self: MetadataClient, *args: Any, **kw: Any) -> None:
        if failures["left"]:
            failures["left"] -= 1
            raise MetadataError("ZooKeeper ConnectionLoss")
        real(self, *args, **kw)

    monkeypatch.setattr(MetadataClient, "register_bookie", register_bookie)
    cluster.runtime.call(bookie._go_readonly)
    _until(lambda: bookie.registration.renewals == 1)
    assert cluster.metadata.readonly_bookies() == ["bookie-1"]
    assert cluster.metadata.writable_bookies() == ["bookie-2", "bookie-3"]
