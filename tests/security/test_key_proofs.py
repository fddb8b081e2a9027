"""A hostile client on a bookie port: every state change without the ledger's key is refused.

The attacker speaks the wire format itself (embedlog.wire.messages frames, behind the
TCP transport's u32 length prefix) over a plain socket to the addresses the bookies
register, as anyone who can reach a bookie port could. Each attack is tried with no key
and with a wrong one; the answer must be EUA, and every acknowledged entry must stay
readable and every writer keep working.

A well-formed key sent for a ledger id no bookie holds yet binds on first contact (as in
BookKeeper); docs/security.md says how that is mitigated, and tests/bookie/test_keys.py
shows the rule. The attacks on ids not yet created here use malformed keys only.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from embedlog import DigestType
from embedlog.transport.tcp import LENGTH, parse_address
from embedlog.wire.codes import StatusCode
from embedlog.wire.entry import Digester, master_key
from embedlog.wire.messages import (
    AddFlags,
    OpCode,
    ReadFlags,
    Request,
    Response,
    TrimFlags,
)

PASSWORD = b"secret"
WRONG = master_key(b"a guess")  # a well-formed key, but not the ledger's
BAD_KEYS = [b"", WRONG]
MAX_TERM = 2**63 - 1


class Hostile:
    """One plain socket per bookie; a request is answered before the next is sent."""

    def __init__(self, cluster: Any) -> None:
        self._socks: dict[str, socket.socket] = {}
        self._txn = 0
        for b in cluster.bookie_ids:
            host, port = parse_address(str(cluster.metadata.bookie_info(b)["address"]))
            assert host == "127.0.0.1"
            # A guard against a hang, not a timing assertion: every answer is immediate.
            self._socks[b] = socket.create_connection((host, port), timeout=60)

    def ask(self, bookie: str, op: OpCode, ledger_id: int, entry_id: int = -1, **kw: Any) -> int:
        """The status ``bookie`` answers to the request."""
        self._txn += 1
        frame = Request(op, self._txn, ledger_id, entry_id, **kw).encode()
        sock = self._socks[bookie]
        sock.sendall(LENGTH.pack(len(frame)) + frame)
        (n,) = LENGTH.unpack(self._exactly(sock, LENGTH.size))
        resp = Response.decode(self._exactly(sock, n))
        assert (resp.txn, resp.ledger_id) == (self._txn, ledger_id)
        return resp.status

    def everywhere(self, op: OpCode, ledger_id: int, entry_id: int = -1, **kw: Any) -> set[int]:
        """The statuses every bookie answers."""
        return {self.ask(b, op, ledger_id, entry_id, **kw) for b in self._socks}

    @staticmethod
    def _exactly(sock: socket.socket, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            assert chunk, "the bookie closed the connection"
            data += chunk
        return data

    def close(self) -> None:
        for s in self._socks.values():
            s.close()


@pytest.fixture
def tcp(make_cluster: Any) -> Any:
    return make_cluster(3, transport="tcp")


@pytest.fixture
def hostile(tcp: Any) -> Iterator[Hostile]:
    h = Hostile(tcp)
    yield h
    h.close()


def payloads(n: int, tag: bytes = b"e") -> list[bytes]:
    return [tag + b"%d" % i for i in range(n)]


def read_all(client: Any, ledger_id: int) -> list[bytes]:
    rh = client.open_ledger(ledger_id, password=PASSWORD)
    data = [e.data for e in rh.read(0, rh.last_add_confirmed)]
    rh.close()
    return data


@pytest.mark.parametrize("key", BAD_KEYS, ids=["no-key", "wrong-key"])
def test_delete_and_trim_of_a_closed_mac_ledger_are_refused(
    tcp: Any, hostile: Hostile, key: bytes
) -> None:
    client = tcp.client("owner")
    wh = client.create_ledger(3, 3, 3, digest=DigestType.MAC, password=PASSWORD)
    data = payloads(10)
    for p in data:
        wh.add(p)
    wh.close()
    lid = wh.ledger_id
    assert hostile.everywhere(OpCode.DELETE_LEDGER, lid, master_key=key) == {StatusCode.EUA}
    assert hostile.everywhere(OpCode.TRIM, lid, 10, master_key=key) == {StatusCode.EUA}
    above = dict(flags=TrimFlags.ABOVE, term=MAX_TERM, master_key=key)
    assert hostile.everywhere(OpCode.TRIM, lid, -1, **above) == {StatusCode.EUA}
    forged = Digester(DigestType.CRC32C).pack(lid, 3, 9, b"forged")
    got = hostile.everywhere(
        OpCode.ADD, lid, 3, flags=AddFlags.RECOVERY, master_key=key, body=forged
    )
    assert got == {StatusCode.EUA}
    # Every replica still holds every entry (AQ = 3: each bookie acknowledged each one).
    for b in tcp.bookie_ids:
        assert [tcp.read_from_bookie(b, lid, e) for e in range(10)] == data
    assert read_all(tcp.client("reader"), lid) == data
    # The owner's delete proves the key: it reaches every bookie.
    client.delete_ledger(lid)
    statuses = hostile.everywhere(OpCode.READ, lid, 0)
    assert statuses == {StatusCode.ENOLEDGER}


@pytest.mark.parametrize("key", BAD_KEYS, ids=["no-key", "wrong-key"])
def test_a_forged_lac_on_an_open_ledger_is_refused(tcp: Any, hostile: Hostile, key: bytes) -> None:
    wh = tcp.client("writer").create_ledger(3, 3, 2, password=PASSWORD)
    data = payloads(5)
    for p in data:
        wh.add(p)
    lid = wh.ledger_id
    assert hostile.everywhere(OpCode.WRITE_LAC, lid, 1000, master_key=key) == {StatusCode.EUA}
    data.append(b"after the attack")
    assert wh.add(data[-1]) == 5
    # Recovery closes the ledger at its true end, and every entry reads back.
    assert read_all(tcp.client("recoverer"), lid) == data
    md = tcp.client("m").ledger_metadata(lid)
    assert md.last_entry_id == 5


@pytest.mark.parametrize("key", BAD_KEYS, ids=["no-key", "wrong-key"])
def test_fencing_a_live_writer_is_refused(tcp: Any, hostile: Hostile, key: bytes) -> None:
    wh = tcp.client("writer").create_ledger(3, 3, 2, password=PASSWORD)
    data = payloads(5)
    for p in data:
        wh.add(p)
    lid = wh.ledger_id
    fence = ReadFlags.FENCE
    assert hostile.everywhere(OpCode.READ, lid, -1, flags=fence, master_key=key) == {StatusCode.EUA}
    recovery = ReadFlags.FENCE | ReadFlags.RECOVERY
    assert hostile.everywhere(OpCode.READ, lid, 0, flags=recovery, master_key=key) == {
        StatusCode.EUA
    }
    more = payloads(5, b"more")
    assert [wh.add(p) for p in more] == [5, 6, 7, 8, 9]  # not fenced
    wh.close()
    assert read_all(tcp.client("reader"), lid) == data + more


@pytest.mark.parametrize("key", [b"", b"k", b"k" * 64], ids=["no-key", "short", "long"])
def test_ledger_ids_not_yet_created_cannot_be_fenced_or_claimed(
    tcp: Any, hostile: Hostile, key: bytes
) -> None:
    client = tcp.client("owner")
    first = client.create_ledger(3, 3, 3, password=PASSWORD)
    first.close()
    future = range(first.ledger_id + 1, first.ledger_id + 4)  # ids are allocated in order
    for lid in future:
        for flags in (ReadFlags.FENCE, ReadFlags.FENCE | ReadFlags.RECOVERY):
            got = hostile.everywhere(OpCode.READ, lid, -1, flags=flags, master_key=key)
            assert got == {StatusCode.EUA}
        got = hostile.everywhere(OpCode.READ, lid, -1, term=MAX_TERM, master_key=key)
        assert got == {StatusCode.EUA}
        got = hostile.everywhere(
            OpCode.TRIM, lid, -1, flags=TrimFlags.ABOVE, term=MAX_TERM, master_key=key
        )
        assert got == {StatusCode.EUA}
        forged = Digester(DigestType.CRC32C).pack(lid, 0, -1, b"claimed")
        for flags in (AddFlags.NONE, AddFlags.RECOVERY):
            got = hostile.everywhere(OpCode.ADD, lid, 0, flags=flags, master_key=key, body=forged)
            assert got == {StatusCode.EUA}
        assert hostile.everywhere(OpCode.READ, lid, 0) == {StatusCode.ENOLEDGER}  # no state
    for lid in future:
        wh = client.create_ledger(3, 3, 3, password=PASSWORD)
        assert wh.ledger_id == lid
        assert wh.add(b"first") == 0  # every bookie took it (AQ = 3)
        wh.close()
        assert read_all(client, lid) == [b"first"]


@pytest.mark.parametrize("key", BAD_KEYS, ids=["no-key", "wrong-key"])
def test_raising_an_unbounded_ledger_s_term_is_refused(
    tcp: Any, hostile: Hostile, key: bytes
) -> None:
    ul = tcp.client("writer").create_unbounded(3, 3, 2, password=PASSWORD)
    data = payloads(5)
    for p in data:
        ul.append(p)
    lid = ul.ledger_id
    for flags in (ReadFlags.NONE, ReadFlags.FENCE):
        got = hostile.everywhere(OpCode.READ, lid, -1, flags=flags, term=MAX_TERM, master_key=key)
        assert got == {StatusCode.EUA}
    got = hostile.everywhere(
        OpCode.TRIM, lid, -1, flags=TrimFlags.ABOVE, term=MAX_TERM, master_key=key
    )
    assert got == {StatusCode.EUA}
    more = payloads(3, b"more")
    assert [ul.append(p) for p in more] == [5, 6, 7]  # the writer keeps its term
    # A later writer takes over (a term above the first) and writes on.
    nxt = tcp.client("next").open_unbounded(lid, password=PASSWORD)
    assert nxt.term == ul.term + 1
    last = nxt.append(b"next writer")
    assert [e.data for e in nxt.read(0, last)] == data + more + [b"next writer"]
