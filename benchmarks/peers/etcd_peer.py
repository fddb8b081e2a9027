"""etcd: three members (Debian's ``etcd-server``) on 127.0.0.1, each write a put of one
key through etcd's JSON gateway (``/v3/kv/put``, HTTP/1.1 keep-alive), a follower a watch
on that key (``/v3/watch``) on another connection. etcd fsyncs its WAL before a put is
acknowledged. The pipelined phase keeps CONNECTIONS puts in flight (one per connection):
the gateway answers one request per connection at a time."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from common import Figures, Load, free_ports, payload, pipelined, seq_of, wait_until

KEY = base64.b64encode(b"bench").decode()
CONNECTIONS = 64


@contextmanager
def etcd_cluster(directory: Path) -> Iterator[list[int]]:
    binary = shutil.which("etcd")
    if binary is None:
        raise RuntimeError("etcd is not installed: apt-get install etcd-server etcd-client")
    ports = free_ports(6)
    clients, peers = ports[:3], ports[3:]
    initial = ",".join(f"m{i}=http://127.0.0.1:{p}" for i, p in enumerate(peers))
    procs = []
    try:
        for i in range(3):
            log = (directory / f"m{i}.log").open("wb")
            cmd = [
                binary,
                f"--name=m{i}",
                f"--data-dir={directory / f'm{i}'}",
                f"--listen-client-urls=http://127.0.0.1:{clients[i]}",
                f"--advertise-client-urls=http://127.0.0.1:{clients[i]}",
                f"--listen-peer-urls=http://127.0.0.1:{peers[i]}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peers[i]}",
                f"--initial-cluster={initial}",
                "--initial-cluster-token=bench",
                "--initial-cluster-state=new",
            ]
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=log))
        for port in clients:
            wait_until(lambda p=port: _healthy(p), 30, "etcd")
        yield clients
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _healthy(port: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
        return bool(json.loads(r.read()).get("health") == "true")


def measure(directory: Path, load: Load) -> Figures:
    with etcd_cluster(directory) as ports:
        return asyncio.run(_measure(ports, load))


def _put_request(data: bytes) -> bytes:
    body = json.dumps({"key": KEY, "value": base64.b64encode(data).decode()}).encode()
    return (
        b"POST /v3/kv/put HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body) + body
    )


async def _read_body(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    status = head.split(b" ", 2)[1]
    headers = head.lower()
    if b"content-length:" in headers:
        n = int(headers.split(b"content-length:")[1].split(b"\r\n")[0])
        body = await reader.readexactly(n)
    else:  # chunked
        body = b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                break
            body += chunk[:-2]
    if status != b"200":
        raise RuntimeError(f"etcd answered {status.decode()}: {body[:200]!r}")
    return body


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def put(self, request: bytes) -> None:
        self.writer.write(request)
        await _read_body(self.reader)

    def close(self) -> None:
        self.writer.close()


async def _measure(ports: list[int], load: Load) -> Figures:
    fig = Figures()
    request = _put_request(payload(0))
    conns = [await Connection.open(ports[i % 3]) for i in range(CONNECTIONS)]
    for _ in range(200):
        await conns[0].put(request)
    per_conn = load.entries // CONNECTIONS

    async def worker(c: Connection) -> None:
        for _ in range(per_conn):
            await c.put(request)

    with pipelined(fig, per_conn * CONNECTIONS):
        await asyncio.gather(*(worker(c) for c in conns))
    one = conns[0]
    for _ in range(load.blocking):
        t0 = time.perf_counter()
        await one.put(request)
        fig.blocking.append(time.perf_counter() - t0)
    fig.follow = await _follow(ports, one, load)
    for c in conns:
        c.close()
    return fig


async def _follow(ports: list[int], writer: Connection, load: Load) -> list[float]:
    # The watch is on another member than the one the writer's puts go to.
    reader, w = await asyncio.open_connection("127.0.0.1", ports[1])
    body = json.dumps({"create_request": {"key": KEY}}).encode()
    w.write(
        b"POST /v3/watch HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body) + body
    )
    await reader.readuntil(b"\r\n\r\n")
    seen: dict[int, float] = {}

    async def watch() -> None:
        pending = b""
        while len(seen) < load.follow:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            pending += (await reader.readexactly(size + 2))[:-2]
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                if not line.strip():
                    continue
                for ev in json.loads(line).get("result", {}).get("events", []):
                    seen[seq_of(base64.b64decode(ev["kv"]["value"]))] = time.perf_counter()

    watcher = asyncio.ensure_future(watch())
    await asyncio.sleep(0.2)  # the watch is in place before the first write
    started: dict[int, float] = {}
    for i in range(load.follow):
        started[i] = time.perf_counter()
        await writer.put(_put_request(payload(i)))
        await asyncio.sleep(load.gap)
    try:
        await asyncio.wait_for(watcher, 30)
    finally:
        w.close()
    return [seen[i] - started[i] for i in started if i in seen]
