"""Admin commands: ``embedlog sandbox``, ``embedlog bookie ...``, ``embedlog ledger ...``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def _metadata(args: argparse.Namespace) -> Any:
    from embedlog.metadata.client import MetadataClient
    from embedlog.metadata.uri import open_store

    return MetadataClient(open_store(args.metadata_uri, Path(args.data_dir)))


def _ledger_list(args: argparse.Namespace) -> int:
    meta = _metadata(args)
    for lid in meta.list_ledgers():
        print(lid)
    meta.store.close()
    return 0


# What admin output never shows: the ledger's password, and the master key derived from
# it, which is all a client needs to write to, fence or delete the ledger on its bookies.
SECRET_FIELDS = ("password", "password_hash")
HIDDEN = "<hidden>"


def public_metadata(md: Any) -> dict[str, Any]:
    """A ledger's metadata as ``ledger show`` prints it: every field, the secrets hidden."""
    doc: dict[str, Any] = json.loads(md.to_bytes())
    for name in SECRET_FIELDS:
        if name in doc:
            doc[name] = HIDDEN
    doc["version"] = md.version
    return doc


def _ledger_show(args: argparse.Namespace) -> int:
    meta = _metadata(args)
    try:
        md = meta.read_ledger(args.ledger_id)
    finally:
        meta.store.close()
    print(json.dumps(public_metadata(md), indent=2, sort_keys=True))
    return 0


def _bookie_list(args: argparse.Namespace) -> int:
    meta = _metadata(args)
    for b in meta.writable_bookies():
        print(f"{b}\twritable\t{meta.bookie_info(b)}")
    for b in meta.readonly_bookies():
        print(f"{b}\treadonly\t{meta.bookie_info(b)}")
    meta.store.close()
    return 0


def _bookie_address(data_dir: Path, bookie_id: str, given: str | None) -> str:
    from embedlog.transport.tcp import ADDRESS_FILE

    if given:
        return given
    stored = data_dir / bookie_id / ADDRESS_FILE
    if stored.exists() and stored.read_text().strip():
        return stored.read_text().strip()
    return f"inprocess:{bookie_id}"


def _bookie_fixcookie(args: argparse.Namespace) -> int:
    from embedlog.bookie.config import BookieConfig
    from embedlog.bookie.fixcookie import fix_cookies

    data_dir = Path(args.data_dir)
    if not (data_dir / args.bookie_id).is_dir():
        return fail(
            f"embedlog bookie fixcookie: no bookie directory {data_dir / args.bookie_id}; "
            "check --data-dir (the cluster's directory) and the bookie id"
        )
    config = BookieConfig(
        bookie_id=args.bookie_id,
        data_dir=data_dir / args.bookie_id,
        address=_bookie_address(data_dir, args.bookie_id, args.address),
    )
    meta = _metadata(args)
    try:
        fixed = fix_cookies(config, meta)
    finally:
        meta.store.close()
    if not fixed:
        print(f"bookie {args.bookie_id}: cookies are fine, nothing to fix")
        return 0
    for problem in fixed:
        print(f"fixed: {problem}")
    print(
        f"bookie {args.bookie_id}: cookies rewritten. Its next boot fences its ledgers, puts "
        "them in limbo and repairs them from its peers; follow it with `embedlog bookie status`."
    )
    return 0


def _bookie_status(args: argparse.Namespace) -> int:
    meta = _metadata(args)
    try:
        ids = [args.bookie_id] if args.bookie_id else meta.known_bookies()
        for bid in ids:
            running = (
                "writable"
                if bid in meta.writable_bookies()
                else ("readonly" if bid in meta.readonly_bookies() else "down")
            )
            status = meta.bookie_status(bid) or {}
            repair = status.get("repair", {})
            print(f"{bid}\t{running}\tlast status: {json.dumps(status.get('state'))}")
            if status.get("suspicious_boot"):
                print(f"  suspicious boot: {'; '.join(status['suspicious_boot'])}")
            for damage in status.get("entry_log_damage") or ():
                print(f"  disk damage: {damage}")
            if repair:
                print(
                    f"  repair: {repair.get('state')}, {repair.get('ledgers_done')}/"
                    f"{repair.get('ledgers_total')} ledgers, {repair.get('entries_copied')} "
                    f"entries copied, {repair.get('ledgers_recovered')} recovered"
                )
                for lid, why in (repair.get("waiting") or {}).items():
                    print(f"  waiting: ledger {lid}: {why}")
            if args.verbose_json:
                print(json.dumps(status, indent=2, sort_keys=True))
    finally:
        meta.store.close()
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", required=True, help="the cluster's data directory")
    p.add_argument("--metadata-uri", default=None, help="zk://host:port/path; default: embedded")


def add_commands(sub: Any) -> None:
    ledger = sub.add_parser("ledger", help="inspect ledgers").add_subparsers(
        dest="ledger_command", required=True
    )
    p = ledger.add_parser("list", help="list ledger ids")
    _common(p)
    p.set_defaults(func=_ledger_list)
    p = ledger.add_parser("show", help="print a ledger's metadata")
    _common(p)
    p.add_argument("ledger_id", type=int)
    p.set_defaults(func=_ledger_show)

    bookie = sub.add_parser("bookie", help="bookie administration").add_subparsers(
        dest="bookie_command", required=True
    )
    p = bookie.add_parser("list", help="registered bookies")
    _common(p)
    p.set_defaults(func=_bookie_list)
    p = bookie.add_parser(
        "fixcookie",
        help="accept a stopped bookie's replaced or wiped disks (BP-46)",
        description=(
            "Rewrite the cookies of a stopped bookie whose disks were replaced or wiped. "
            "Its next boot fences its ledgers, puts them in limbo and repairs them from peers."
        ),
    )
    _common(p)
    p.add_argument("bookie_id")
    p.add_argument(
        "--address", default=None, help="the bookie's advertised address (default: as stored)"
    )
    p.set_defaults(func=_bookie_fixcookie)
    p = bookie.add_parser("status", help="boot and BP-46 repair status of bookies")
    _common(p)
    p.add_argument("bookie_id", nargs="?", default=None)
    p.add_argument("--json", dest="verbose_json", action="store_true", help="full status")
    p.set_defaults(func=_bookie_status)
    __import__("embedlog.process.command").process.command.add_run_command(bookie)

    add_sandbox_command(sub)
    from embedlog.auditor.cli import add_auditor_commands

    add_auditor_commands(sub)


def fail(message: str) -> int:
    print(message, file=sys.stderr)
    return 2


# -- embedlog sandbox ----------------------------------------------------------------------------

SANDBOX_CHROOT = "/embedlog"


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
    p.add_argument("--processes", action="store_true", help="each bookie in a process of its own")
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus metrics at http://127.0.0.1:PORT/metrics (needs "
        "pip install 'embedlog[metrics]')",
    )
    p.set_defaults(func=_sandbox)


def _sandbox(args: argparse.Namespace) -> int:
    import shutil
    import signal
    import tempfile
    import threading

    from embedlog.cluster import LocalCluster
    from embedlog.metadata import zkserver
    from embedlog.prometheus import MetricsServer
    from embedlog.transport.tcp import stable_address

    if args.bookies < 1:
        return fail("embedlog sandbox: --bookies must be at least 1")
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        return fail("embedlog sandbox: --metrics-port must be a port number, 0 to 65535")
    if args.metrics_port is not None and args.processes:
        return fail(
            "embedlog sandbox: --metrics-port with --processes: the bookies' metrics stay in "
            "their processes and are not exported yet; leave out one of the two"
        )
    own_dir = args.data_dir is None
    data_dir = Path(tempfile.mkdtemp(prefix="embedlog-sandbox-") if own_dir else args.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    zk: zkserver.ZooKeeperServer | None = None
    cluster: LocalCluster | None = None
    exporter: MetricsServer | None = None
    # SIGTERM (a supervisor, `kill`) stops as cleanly as Ctrl-C.
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        uri = args.metadata_uri
        if uri is None:
            try:
                zkserver.find_classpath()
                zkserver.find_java()
            except zkserver.ZooKeeperNotInstalled as exc:
                return fail(
                    f"embedlog sandbox: {exc}\n(the sandbox shares metadata with other "
                    "processes through ZooKeeper; or pass --metadata-uri zk://host:port/path "
                    "to use a running one)"
                )
            # A fixed port under data_dir: the metadata (and the bookies' cookies in it)
            # is the same on the next run with this --data-dir.
            zk_dir = data_dir / "zookeeper"
            port = int(stable_address(zk_dir).rpartition(":")[2])
            zk = zkserver.ZooKeeperServer(zk_dir, port=port)
            print(f"starting ZooKeeper on 127.0.0.1:{port} ...", flush=True)
            zk.start()
            uri = zk.uri(SANDBOX_CHROOT)
        tls_files = {
            "tls_cert": args.tls_cert,
            "tls_key": args.tls_key,
            "tls_ca": args.tls_ca,
            "tls_require_client_cert": args.tls_require_client_cert,
        }
        cluster = LocalCluster(
            args.bookies,
            data_dir,
            transport="tcp",
            tls=args.tls,
            metadata_uri=uri,
            processes=args.processes,
            **{k: v for k, v in tls_files.items() if v},
        ).start()
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
        if args.metrics_port is not None:
            from embedlog.prometheus import serve_metrics

            try:
                exporter = serve_metrics(cluster, args.metrics_port)
            except (ImportError, OSError) as exc:
                return fail(f"embedlog sandbox: cannot serve metrics: {exc}")
            print(f"Prometheus metrics: {exporter.url}")
        print("sandbox running; Ctrl-C to stop", flush=True)
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        if exporter is not None:
            exporter.close()
        if cluster is not None:
            cluster.stop()
        if zk is not None:
            zk.stop()
        if own_dir:
            shutil.rmtree(data_dir, ignore_errors=True)
    print("sandbox stopped", flush=True)
    return 0
