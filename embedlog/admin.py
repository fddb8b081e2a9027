"""Admin commands: ``embedlog bookie ...``; registers ``ledger``, ``sandbox``, ``auditor``.

``bookie list`` and ``bookie status`` only look (embedlog/cli_access.py says how);
``bookie fixcookie`` changes a stopped bookie's cookies.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from embedlog import cli_access
from embedlog.admin_ledger import public_metadata
from embedlog.console import print_json, table


def bookie_rows(meta: Any) -> list[dict[str, Any]]:
    """Every bookie of the cluster once: the registered ones (writable, then read-only:
    a bookie going read-only may briefly be under both), then those with a cookie that
    are not registered, as ``down`` with the address their cookie recorded."""
    writable = sorted(meta.writable_bookies())
    readonly = sorted(set(meta.readonly_bookies()) - set(writable))
    rows: list[dict[str, Any]] = []
    for state, ids in (("writable", writable), ("readonly", readonly)):
        for bid in ids:
            info = meta.bookie_info(bid) or {}
            rows.append(
                {
                    "bookie_id": bid,
                    "state": state,
                    "address": info.get("address"),
                    "rack": info.get("rack"),
                }
            )
    for bid in sorted(set(meta.known_bookies()) - set(writable) - set(readonly)):
        address = _cookie_address(meta, bid)
        rows.append({"bookie_id": bid, "state": "down", "address": address, "rack": None})
    return rows


def _cookie_address(meta: Any, bookie_id: str) -> str | None:
    from embedlog.bookie.cookie import Cookie
    from embedlog.errors import CookieError

    stored = meta.read_cookie(bookie_id)
    try:
        return None if stored is None else Cookie.from_bytes(stored[0]).address
    except CookieError:
        return None


def _bookie_list(args: argparse.Namespace) -> int:
    with cli_access.metadata(args) as meta:
        rows = bookie_rows(meta)
    if args.json:
        print_json(rows)
        return 0
    columns = ("BOOKIE", "STATE", "ADDRESS", "RACK")
    print(table(columns, [[r["bookie_id"], r["state"], r["address"], r["rack"]] for r in rows]))
    if not rows:
        print(
            "no bookie has booted in this cluster yet (none registered, no cookies)",
            file=sys.stderr,
        )
    elif all(r["state"] == "down" for r in rows):
        print(
            f"no bookie is running: the {len(rows)} above booted here before (their cookies "
            "say so); `embedlog bookie status` says how each one last was",
            file=sys.stderr,
        )
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

    if args.data_dir is None:
        raise cli_access.WrongTargetError(
            "bookie fixcookie needs --data-dir: the directory holding the bookie's bookie-N/"
        )
    data_dir = Path(args.data_dir)
    if args.metadata_uri is None:
        data_dir = cli_access.cluster_dir(args.data_dir)
    cli_access.bookie_dir(data_dir, args.bookie_id)
    config = BookieConfig(
        bookie_id=args.bookie_id,
        data_dir=data_dir / args.bookie_id,
        address=_bookie_address(data_dir, args.bookie_id, args.address),
    )
    with cli_access.metadata(args, readonly=False) as meta:
        fixed = fix_cookies(config, meta)
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


def bookie_statuses(meta: Any, bookie_id: str | None) -> dict[str, dict[str, Any]]:
    """bookie id -> {"running": writable|readonly|down, "status": its last published status}."""
    writable, readonly = set(meta.writable_bookies()), set(meta.readonly_bookies())
    known = meta.known_bookies()
    if bookie_id and bookie_id not in {*known, *writable, *readonly}:
        raise ValueError(
            f"no bookie {bookie_id} in this cluster (not registered, no cookie); its bookies: "
            f"{', '.join(sorted({*known, *writable, *readonly})) or 'none yet'} "
            "(`embedlog bookie list`)"
        )
    ids = [bookie_id] if bookie_id else known
    out: dict[str, dict[str, Any]] = {}
    for bid in ids:
        running = "writable" if bid in writable else ("readonly" if bid in readonly else "down")
        out[bid] = {"running": running, "status": meta.bookie_status(bid) or {}}
    return out


def _print_status(bid: str, running: str, status: dict[str, Any]) -> None:
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


def _bookie_status(args: argparse.Namespace) -> int:
    with cli_access.metadata(args) as meta:
        statuses = bookie_statuses(meta, args.bookie_id)
    if args.json:
        print_json(statuses)
        return 0
    for bid, s in statuses.items():
        _print_status(bid, s["running"], s["status"])
    return 0


def add_commands(sub: Any) -> None:
    from embedlog.admin_auditor import add_auditor_commands
    from embedlog.admin_decommission import add_decommission_command
    from embedlog.admin_ledger import add_ledger_commands
    from embedlog.admin_stream import add_stream_commands
    from embedlog.process.command import add_run_command
    from embedlog.sandbox import add_sandbox_command

    add_ledger_commands(sub)
    add_stream_commands(sub)
    bookie = sub.add_parser("bookie", help="bookie administration").add_subparsers(
        dest="bookie_command", required=True
    )
    p = bookie.add_parser("list", help="registered bookies: state, address, rack")
    cli_access.add_target_options(p, tls=False)
    p.add_argument("--json", action="store_true", help="a JSON list instead of the table")
    p.set_defaults(func=_bookie_list)
    p = bookie.add_parser(
        "fixcookie",
        help="accept a stopped bookie's replaced or wiped disks (BP-46)",
        description=(
            "Rewrite the cookies of a stopped bookie whose disks were replaced or wiped. "
            "Its next boot fences its ledgers, puts them in limbo and repairs them from peers."
        ),
    )
    cli_access.add_target_options(p, tls=False)
    p.add_argument("bookie_id")
    p.add_argument(
        "--address", default=None, help="the bookie's advertised address (default: as stored)"
    )
    p.set_defaults(func=_bookie_fixcookie)
    p = bookie.add_parser("status", help="boot and BP-46 repair status of bookies")
    cli_access.add_target_options(p, tls=False)
    p.add_argument("bookie_id", nargs="?", default=None)
    p.add_argument("--json", action="store_true", help="full statuses as one JSON object")
    p.set_defaults(func=_bookie_status)
    add_run_command(bookie)
    add_decommission_command(bookie)

    add_sandbox_command(sub)
    add_auditor_commands(sub)


__all__ = ["add_commands", "bookie_statuses", "public_metadata"]
