"""``embedlog sandbox``: ZooKeeper and bookies over TCP on 127.0.0.1, for other processes.

Stopping (Ctrl-C, SIGTERM) goes in the reverse order of starting: the bookies first,
while ZooKeeper still answers their last metadata calls, then ZooKeeper. ZooKeeper
runs in a session of its own so that a terminal's Ctrl-C, which goes to the whole
foreground process group, reaches the sandbox only: a ZooKeeper that died first left
every bookie retrying its metadata calls for minutes.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path
from typing import Any

from embedlog.stopsignals import StopSignals

SANDBOX_CHROOT = "/embedlog"
PROG = "embedlog sandbox"


def add_sandbox_command(sub: Any) -> None:
    p = sub.add_parser(
        "sandbox",
        help="bookies over TCP plus ZooKeeper metadata, for other processes",
        description=(
            "Start a ZooKeeper server and bookies listening on 127.0.0.1, print the metadata "
            "URI other processes pass to embedlog.connect(), and run until Ctrl-C."
        ),
    )
    p.add_argument("--bookies", type=int, default=3, help="number of bookies (default 3)")
    p.add_argument(
        "--data-dir",
        default=None,
        help="keep bookies and metadata here, reused on the next run (default: a "
        "temporary directory, removed on exit)",
    )
    p.add_argument(
        "--tls",
        action="store_true",
        help="bookies speak TLS with a self-signed certificate made for this sandbox",
    )
    p.add_argument("--tls-cert", default=None, help="the bookies' certificate (PEM): TLS with it")
    p.add_argument("--tls-key", default=None, help="the private key of --tls-cert (PEM)")
    p.add_argument(
        "--tls-ca", default=None, help="CA certificate(s) client certificates must chain to"
    )
    p.add_argument(
        "--tls-require-client-cert",
        action="store_true",
        help="refuse clients without a certificate signed by --tls-ca (mutual TLS)",
    )
    p.add_argument(
        "--metadata-uri",
        default=None,
        help="use this ZooKeeper (zk://host:port/path) instead of starting one",
    )
    from embedlog.cli_access import add_timeout_option

    add_timeout_option(p)
    p.add_argument("--processes", action="store_true", help="each bookie in a process of its own")
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus metrics at http://127.0.0.1:PORT/metrics (needs "
        "pip install 'embedlog[metrics]')",
    )
    p.set_defaults(func=_sandbox)


def _say(message: str) -> None:
    print(message, flush=True)


def _sandbox(args: argparse.Namespace) -> int:
    from embedlog.cluster import LocalCluster
    from embedlog.console import fail
    from embedlog.extras import require
    from embedlog.metadata import zkserver
    from embedlog.prometheus import MetricsServer
    from embedlog.transport.tcp import stable_address

    if args.bookies < 1:
        return fail(f"{PROG}: error: --bookies {args.bookies}: give 1 or more bookies")
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        return fail(f"{PROG}: error: --metrics-port must be a port number, 0 to 65535")
    if args.metrics_port is not None and args.processes:
        return fail(
            f"{PROG}: error: --metrics-port with --processes: the bookies' metrics stay in "
            "their processes and are not exported yet; leave out one of the two"
        )
    # Before anything starts: the sandbox's metadata is ZooKeeper's, through kazoo.
    require("zk", "embedlog sandbox (its metadata lives in ZooKeeper)")
    own_dir = args.data_dir is None
    # Absolute: the sandbox prints it for other processes, which run elsewhere.
    data_dir = Path(
        tempfile.mkdtemp(prefix="embedlog-sandbox-") if own_dir else args.data_dir
    ).absolute()
    data_dir.mkdir(parents=True, exist_ok=True)
    zk: zkserver.ZooKeeperServer | None = None
    zk_running = False
    cluster: LocalCluster | None = None
    exporter: MetricsServer | None = None
    with StopSignals(repeat_message="already stopping; please wait") as signals:
        try:
            uri = args.metadata_uri
            if uri is None:
                try:
                    zkserver.find_classpath()
                    zkserver.find_java()
                except zkserver.ZooKeeperNotInstalled as exc:
                    return fail(
                        f"{PROG}: error: {exc}\n(the sandbox shares metadata with other "
                        "processes through ZooKeeper; or pass --metadata-uri "
                        "zk://host:port/path to use a running one)"
                    )
                # A fixed port under data_dir: the metadata (and the bookies' cookies in
                # it) is the same on the next run with this --data-dir.
                zk_dir = data_dir / "zookeeper"
                port = int(stable_address(zk_dir).rpartition(":")[2])
                zk = zkserver.ZooKeeperServer(zk_dir, port=port)
                uri = zk.uri(SANDBOX_CHROOT)
            tls_files = {
                "tls_cert": args.tls_cert,
                "tls_key": args.tls_key,
                "tls_ca": args.tls_ca,
                "tls_require_client_cert": args.tls_require_client_cert,
            }
            # Made (and its settings, TLS files included, checked) before ZooKeeper
            # starts: a wrong setting is its one line, with nothing started.
            made = LocalCluster(
                args.bookies,
                data_dir,
                transport="tcp",
                tls=args.tls,
                metadata_uri=uri,
                metadata_timeout=args.metadata_timeout,
                processes=args.processes,
                **{k: v for k, v in tls_files.items() if v},
            )
            if zk is not None:
                _say(f"starting ZooKeeper on 127.0.0.1:{zk.port} ...")
                zk.start()
                zk_running = True
            if signals.stop.is_set():
                return 0
            cluster = made
            cluster.start()
            _print_connection(args, cluster, uri, data_dir, own_dir)
            if args.metrics_port is not None:
                from embedlog.prometheus import serve_metrics

                try:
                    exporter = serve_metrics(cluster, args.metrics_port)
                except (ImportError, OSError) as exc:
                    return fail(f"{PROG}: error: cannot serve metrics: {exc}")
                print(f"Prometheus metrics: {exporter.url}")
            _say("sandbox running; Ctrl-C to stop")
            signals.wait()
        finally:
            if exporter is not None:
                exporter.close()
            if cluster is not None:
                _say("stopping the bookies ...")
                cluster.stop()
            if zk is not None:
                if zk_running:
                    _say("stopping ZooKeeper ...")
                zk.stop()  # also one that failed half way through its start
            if own_dir:
                shutil.rmtree(data_dir, ignore_errors=True)
            if zk_running or cluster is not None:
                _say("sandbox stopped")
    return 0


def _print_connection(
    args: argparse.Namespace, cluster: Any, uri: str, data_dir: Path, own_dir: bool
) -> None:
    print(f"metadata URI: {uri}")
    for bid in cluster.bookie_ids:
        print(f"bookie {bid}: {cluster.bookie_config(bid).address}")
    ca = getattr(cluster.transport, "tls_ca", None)
    if ca is not None:
        print(f"TLS CA certificate: {ca}")
    print(f"data directory: {data_dir}{' (temporary)' if own_dir else ''}")
    tls_arg = f", tls_ca={str(ca)!r}" if ca is not None else ""
    if args.tls_ca is not None:
        print(f"clients present a certificate signed by: {args.tls_ca}")
        tls_arg += ", tls_cert=<client certificate>, tls_key=<its key>"
    print(f"connect with: embedlog.connect({uri!r}{tls_arg})")


__all__ = ["SANDBOX_CHROOT", "add_sandbox_command"]
