"""Ending a ZooKeeper session from outside, as ZooKeeper ends one whose client died.

Crash tests cannot wait out a session timeout, so a session is ended the way
ZooKeeper's own tests do it: another connection attaches to the session (its id and
password) and closes it. The server removes the session's ephemeral nodes at once, and
the original client, when it reconnects, is told its session expired.

The attach and the close go out in one write, before any answer. The server reads
nothing more from a connection until its handshake is done, so the close is the next
thing it does for that connection. The original client, dropped by the attach, could
still take the session back if it reconnected before the close is done; embedlog's
clients pause about 0.1 s before reconnecting (``zk_outage.reconnect_retry``), and a
close lost so is tried again.
"""

from __future__ import annotations

import socket
import struct

from kazoo.hosts import collect_hosts

# ZooKeeper's wire format (jute, big-endian): a frame is a 4-byte length and its body.
_CLOSE_SESSION = -11  # OpCode.closeSession
_CLOSE_XID = 1
_ATTEMPTS = 10


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def _read_frame(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", _read_exactly(sock, 4))[0]
    return _read_exactly(sock, size)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("ZooKeeper closed the connection")
        buf += chunk
    return bytes(buf)


def attach_and_close(
    address: tuple[str, int], session: tuple[int, bytes], timeout: float, connect_timeout: float
) -> bool | None:
    """Attach to ``session`` on one server and close it, in one write.

    True: the session was closed. False: the server no longer knows the session
    (already expired or closed). None: the close lost to another connection of the
    session (the server answered it with an error); try again.
    """
    session_id, password = session
    connect = struct.pack(">iqiq", 0, 0, int(timeout * 1000), session_id)
    connect += struct.pack(">i", len(password)) + password + b"\x00"  # not read-only
    close = struct.pack(">ii", _CLOSE_XID, _CLOSE_SESSION)
    with socket.create_connection(address, timeout=connect_timeout) as sock:
        sock.sendall(_frame(connect) + _frame(close))
        # protocolVersion, timeOut, sessionId, passwd: a timeOut of 0 means "expired".
        _, negotiated, _ = struct.unpack_from(">iiq", _read_frame(sock))
        if negotiated <= 0:
            return False
        _, _, err = struct.unpack_from(">iqi", _read_frame(sock))  # xid, zxid, err
        return True if err == 0 else None


def expire_session(
    hosts: str, session: tuple[int, bytes], timeout: float = 10.0, connect_timeout: float = 15.0
) -> None:
    """End ``session`` abruptly from outside: the server removes its ephemerals at once
    (what it does when a session times out; also for a session whose process was killed,
    see LocalCluster(processes=True)). Returns quietly when the session, or every
    server, is already gone."""
    addresses, _chroot = collect_hosts(hosts)  # kazoo's parse, as its clients read them
    for attempt in range(_ATTEMPTS):
        address = addresses[attempt % len(addresses)]
        try:
            if attach_and_close(address, session, timeout, connect_timeout) is not None:
                return
        except OSError:
            continue  # that server is down or dropped us: the next one, or give up


__all__ = ["attach_and_close", "expire_session"]
