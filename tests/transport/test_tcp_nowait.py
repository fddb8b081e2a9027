"""A writer's adds over an open TCP connection go out without a task per request
(``TcpTransport.send_nowait``); a connection still to be opened, a full socket buffer and
configured faults take the path through ``request`` (connect, drain, fault semantics)."""

from __future__ import annotations

from typing import Any

from embedlog.transport.tcp import TcpCluster, TcpTransport


def count_slow_path(monkeypatch: Any, client: TcpTransport) -> list[str]:
    slow: list[str] = []
    real = client._injector.request

    async def request(src, bookie_id, req, timeout, send):  # type: ignore[no-untyped-def]
        slow.append(req.op.name)
        return await real(src, bookie_id, req, timeout, send)

    monkeypatch.setattr(client._injector, "request", request)
    return slow


def test_adds_over_open_connections_take_no_task(make_cluster, monkeypatch):
    cluster = make_cluster(3, transport="tcp")
    assert isinstance(cluster.transport, TcpCluster)
    tcp = cluster.transport.client
    wh = cluster.client("c").create_ledger(3, 3, 2)
    wh.add(b"opens the connections")
    slow = count_slow_path(monkeypatch, tcp)
    ids = [wh.add(b"entry %d" % i) for i in range(20)]
    futures = [wh.add_async(b"pipelined %d" % i) for i in range(2000)]
    assert [f.result() for f in futures] == list(range(21, 2021))
    assert ids == list(range(1, 21))
    assert [op for op in slow if op.startswith("ADD")] == []
    assert [e.data for e in wh.read(1, 3)] == [b"entry 0", b"entry 1", b"entry 2"]


def test_a_full_socket_buffer_takes_the_path_that_waits_for_room(make_cluster, monkeypatch):
    cluster = make_cluster(3, transport="tcp")
    tcp = cluster.transport.client
    wh = cluster.client("c").create_ledger(3, 3, 2)
    wh.add(b"opens the connections")
    conns = list(tcp._conns.values())
    assert conns and all(c.writable() for c in conns)
    for conn in conns:  # as if the socket had not taken the last frames yet
        t = conn._writer.transport
        monkeypatch.setattr(t, "get_write_buffer_size", lambda: 10**9)
    assert not any(c.writable() for c in conns)
    slow = count_slow_path(monkeypatch, tcp)
    assert wh.add(b"after drain") == 1
    assert slow.count("ADD") == 3  # one per bookie, each through drain()


def test_faults_take_the_request_path(make_cluster, monkeypatch):
    cluster = make_cluster(3, transport="tcp")
    tcp = cluster.transport.client
    wh = cluster.client("c").create_ledger(3, 3, 2)
    wh.add(b"opens the connections")
    slow = count_slow_path(monkeypatch, tcp)
    tcp.faults.delay("c", cluster.bookie_ids[0], 0.001)
    assert wh.add(b"delayed") == 1
    assert "ADD" in slow
