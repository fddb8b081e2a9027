"""``embedlog bookie run``: one long-running bookie server (docs/deployment.md)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

from embedlog.process.settings import SettingError, resolve
from embedlog.stopsignals import StopSignals, to_main_thread

PROG = "embedlog bookie run"


def add_run_command(bookie_commands: Any) -> None:
    p = bookie_commands.add_parser(
        "run",
        help="run one bookie server until SIGTERM or Ctrl-C",
        description=(
            "Run one bookie: it boots on its disks (--data-dir), registers in ZooKeeper and "
            "serves on --listen until SIGTERM or SIGINT, then stops cleanly. Settings come "
            "from the flags and the TOML --config file (flags win); docs/deployment.md lists them."
        ),
    )
    p.add_argument("--data-dir", default=None, help="this bookie's directory (its disks)")
    p.add_argument("--metadata-uri", default=None, help="the cluster's zk://host:port/path")
    p.add_argument("--listen", default=None, help="HOST:PORT to listen on")
    p.add_argument(
        "--advertise", default=None, help="HOST:PORT clients connect to (default: --listen)"
    )
    p.add_argument(
        "--id",
        default=None,
        help="bookie id, unique in the cluster (default: the disks' own, else the advertised "
        "address)",
    )
    p.add_argument("--config", default=None, help="TOML file of settings (docs/deployment.md)")
    p.add_argument("--tls-cert", default=None, help="the bookie's certificate (PEM): TLS with it")
    p.add_argument("--tls-key", default=None, help="the private key of --tls-cert (PEM)")
    p.add_argument("--tls-ca", default=None, help="CA certificate(s) clients' must chain to")
    p.add_argument(
        "--tls-require-client-cert",
        action="store_true",
        default=None,
        help="refuse clients without a certificate signed by --tls-ca (mutual TLS)",
    )
    p.add_argument(
        "--auto-fix-cookies",
        action="store_true",
        default=None,
        help="accept replaced or wiped disks: fence the bookie's ledgers and repair them (BP-46)",
    )
    p.add_argument(
        "--metadata-timeout",
        type=float,
        default=None,
        help="seconds to wait for ZooKeeper, at start and then in each metadata call (default 10)",
    )
    # For LocalCluster(processes=True): where to report readiness (or why not), and stop
    # cleanly when the supervising process goes away (its end of stdin closes).
    p.add_argument("--ready-file", default=None, help=argparse.SUPPRESS)
    p.add_argument("--stop-on-stdin-eof", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "data_dir": args.data_dir,
        "metadata_uri": args.metadata_uri,
        "listen": args.listen,
        "advertise": args.advertise,
        "id": args.id,
        "metadata_timeout": args.metadata_timeout,
        "tls_cert": args.tls_cert,
        "tls_key": args.tls_key,
        "tls_ca": args.tls_ca,
        "tls_require_client_cert": args.tls_require_client_cert,
        "auto_fix_cookies": args.auto_fix_cookies,
    }


def _report(path: str | None, doc: dict[str, Any]) -> None:
    """Write the ready file atomically: its reader sees all of it or nothing."""
    if path is None:
        return
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, target)


def _error(message: str, ready_file: str | None, kind: str = "ValueError") -> int:
    _report(ready_file, {"error": kind, "message": message})
    print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)
    return 2


def run(args: argparse.Namespace) -> int:
    from embedlog.process.server import BookieService, StartError

    try:
        settings = resolve(_flags(args), Path(args.config) if args.config else None)
    except SettingError as exc:
        return _error(str(exc), args.ready_file)
    # From here on SIGTERM and SIGINT only ask for a stop: one arriving during the boot
    # stops the bookie cleanly once it has booted.
    with StopSignals() as signals:
        service = BookieService(settings)
        try:
            service.start()
        except StartError as exc:
            return _error(str(exc), args.ready_file, exc.kind)

        def report_ready() -> None:
            # Again after each registration with a new session: the supervisor ends the
            # session that holds the registration when it kills the process.
            session = service.session_id
            _report(
                args.ready_file,
                {
                    "bookie_id": service.bookie_id,
                    "address": settings.advertise,
                    "pid": os.getpid(),
                    "session": None if session is None else [session[0], session[1].hex()],
                },
            )

        report_ready()
        service.on_registration_renewed(report_ready)
        print(
            f"bookie {service.bookie_id} serving at {settings.advertise} (listening on "
            f"{settings.listen[0]}:{settings.listen[1]}, metadata {settings.metadata_uri}); "
            "SIGTERM or Ctrl-C stops it",
            flush=True,
        )
        if args.stop_on_stdin_eof:
            watcher = threading.Thread(target=_stop_at_eof, args=(signals.stop,), daemon=True)
            with to_main_thread():
                watcher.start()
        signals.wait()
        from embedlog.errors import BKError

        try:
            service.stop()
        except BKError as exc:
            print(f"{PROG}: error: {exc}", file=sys.stderr, flush=True)
            return 1
        print(f"bookie {service.bookie_id} stopped cleanly", flush=True)
        return 0


def _stop_at_eof(stop: threading.Event) -> None:
    # The raw descriptor, not sys.stdin: a daemon thread blocked in a buffered read holds
    # its lock, and the interpreter would abort on it at exit.
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    stop.set()
