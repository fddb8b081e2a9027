"""expire_session ends a live client's session from outside, as ZooKeeper ends the session
of a client that died (crash tests, and LocalCluster's crash of a bookie process, rely on
it): the attach and the close go out in one write, so the client, dropped by the attach,
finds its session expired when it reconnects, and its ephemeral nodes are gone."""

from __future__ import annotations

from embedlog.metadata.uri import parse_zk_uri
from embedlog.metadata.zk_expire import attach_and_close, expire_session
from embedlog.metadata.zookeeper_store import ZooKeeperMetadataStore


def test_live_sessions_expire_and_their_ephemerals_go(zk_uri: str) -> None:
    hosts, chroot = parse_zk_uri(zk_uri)
    store = ZooKeeperMetadataStore(hosts, chroot or "/t")
    try:
        # Several sessions, one after the other: each client is alive and reconnects
        # after the drop, and must not take its session back.
        for i in range(8):
            session = store.session()
            try:
                session.create(f"/alive-{i}", b"x", ephemeral=True)
                sid = session.session_id
                assert sid is not None
                expire_session(hosts, sid)
                assert not store.exists(f"/alive-{i}")
                # The session is gone: attaching to it again finds nothing to close.
                host, port = hosts.split(",")[0].rsplit(":", 1)
                assert attach_and_close((host, int(port)), sid, 10.0, 15.0) is False
            finally:
                session.close()
    finally:
        store.close()
