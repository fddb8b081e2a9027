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


def _ledger_show(args: argparse.Namespace) -> int:
    meta = _metadata(args)
    md = meta.read_ledger(args.ledger_id)
    doc = json.loads(md.to_bytes())
    doc["version"] = md.version
    print(json.dumps(doc, indent=2, sort_keys=True))
    meta.store.close()
    return 0


def _bookie_list(args: argparse.Namespace) -> int:
    meta = _metadata(args)
    for b in meta.writable_bookies():
        print(f"{b}\twritable\t{meta.bookie_info(b)}")
    for b in meta.readonly_bookies():
        print(f"{b}\treadonly\t{meta.bookie_info(b)}")
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


def fail(message: str) -> int:
    print(message, file=sys.stderr)
    return 2
