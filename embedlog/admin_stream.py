"""``embedlog stream list|show|read|tail|cursors|reset-cursor|create|delete``.

Streams by name (or ledger id), as a Kafka or JetStream user manages topics and consumer
positions. Every command takes ``--metadata-uri`` (a running cluster) or ``--data-dir``
(a stopped LocalCluster's directory) like the other commands. list, show, read, tail and
cursors only look: they open the stream as a follower (``takeover=False``), which never
disturbs its writer, and on a ``--data-dir`` they work on a private copy. create,
delete and reset-cursor change the cluster; delete, and a reset that moves a cursor
back, ask first unless ``--yes``.

``list`` and ``show`` give the entries each stream keeps (what readers see: no-op ids
of takeovers are not entries) and their payload bytes, from retention's marks where they
vouch for a stretch, else by reading the entries (admin_stream_kept).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from embedlog import cli_access
from embedlog.admin_ledger import confirm, ledger_or_stream, password, write_entry
from embedlog.console import print_json, table
from embedlog.errors import NoSuchLedgerInMetadataError

if TYPE_CHECKING:
    from embedlog.client import Client
    from embedlog.ledger.entries import Entry
    from embedlog.unbounded.ledger import UnboundedLedger

FORMATS = ("text", "raw", "json")


def _follower(client: Client, args: argparse.Namespace) -> UnboundedLedger:
    return client.open_unbounded(
        stream_id(client, args.stream), password=password(args), takeover=False
    )


def stream_id(client: Client, text: str) -> int:
    """The ledger id of the stream ``text`` names on the command line: a stream's name, or
    a ledger id. Digits are a name when a stream is called so: ``stream delete 1`` must
    not delete ledger 1 when ``stream list`` shows a stream named "1". Digits that are
    both a stream's name and another ledger's id are refused, naming both."""
    target = ledger_or_stream(text)
    if isinstance(target, str):
        return client.stream_id(target)
    names = client.list_streams()
    named = names.get(text)
    if named is None or named == target:
        return target
    try:
        client.ledger_metadata(target)
    except NoSuchLedgerInMetadataError:
        return named  # no ledger has that id: the name it is
    others = sorted(n for n, lid in names.items() if lid == target)
    other = f"its name {others[0]!r}" if others else "the `embedlog ledger` commands"
    raise ValueError(
        f"{text!r} is both the name of the stream of ledger {named} and the id of ledger "
        f"{target}: for the stream named {text!r} give its ledger id {named}; for ledger "
        f"{target}, use {other}"
    )


def stream_row(
    client: Client,
    name: str | None,
    ledger_id: int,
    *,
    secret: bytes = b"",
    counted: bool = True,
) -> dict[str, Any]:
    """One stream as ``stream list`` and ``stream show`` report it; ``counted``: with the
    entries and bytes it keeps (admin_stream_kept: this may read entries)."""
    from embedlog import admin_stream_kept
    from embedlog.unbounded import layout

    ul = client.open_unbounded(ledger_id, password=secret, takeover=False)
    try:
        kept = admin_stream_kept.count(ul) if counted else None
        if kept is not None:
            first, lac = kept.first_kept, kept.lac
        else:
            first = ul.first_entry_id()  # the metadata and the LAC read again
            lac = ul.last_add_confirmed
        md = ul.metadata
        retention = layout.retention(md)
        row: dict[str, Any] = {
            "name": name if name is not None else layout.name(md),
            "ledger_id": ledger_id,
            "term": md.term,
            "first_kept": first,
            "lac": lac,
        }
        if kept is not None:
            row.update(entries_kept=kept.entries, bytes_kept=kept.bytes)
        row.update(
            dedup_window=layout.dedup_window(md),
            retention=None if retention is None else retention.to_json(),
            retention_overrides_cursors=layout.retention_overrides_cursors(md),
            cursors={
                c: {
                    "position": p,
                    "lag": max(0, lac - p),
                    "lag_seconds": _lag_seconds(ul, max(p + 1, first), lac),
                }
                for c, p in ul.cursors().items()
            },
        )
        return row
    finally:
        ul.close()


def _lag_seconds(ul: UnboundedLedger, next_id: int, lac: int) -> float | None:
    """How long the oldest record a cursor has not taken has waited: now minus its
    timestamp (0 when it took everything; None when that entry has no timestamp)."""
    for first in range(next_id, lac + 1, 8):
        entries = ul.read(first, min(first + 7, lac))
        if entries:
            stamp = entries[0].timestamp
            return None if stamp is None else round(max(0.0, time.time() - stamp), 3)
    return 0.0


def _retention_text(doc: dict[str, Any] | None) -> str:
    if not doc:
        return "-"
    parts = [f"{k.removeprefix('max_')}={v}" for k, v in doc.items() if v is not None]
    return ",".join(parts) or "-"


def _list(args: argparse.Namespace) -> int:
    with cli_access.cluster(args, readonly=True) as access:
        rows = [
            stream_row(access.client, name, lid, secret=password(args))
            for name, lid in sorted(access.client.list_streams().items())
        ]
    if args.json:
        print_json(rows)
        return 0
    headers = ["name", "ledger", "first kept", "lac", "entries kept", "bytes kept"]
    headers += ["dedup window", "retention", "cursors"]
    print(
        table(
            headers,
            [
                [
                    r["name"],
                    r["ledger_id"],
                    r["first_kept"],
                    r["lac"],
                    r["entries_kept"],
                    r["bytes_kept"],
                    f"{r['dedup_window']:g}s",
                    _retention_text(r["retention"]),
                    len(r["cursors"]),
                ]
                for r in rows
            ],
        )
    )
    return 0


def _show(args: argparse.Namespace) -> int:
    with cli_access.cluster(args, readonly=True) as access:
        lid = stream_id(access.client, args.stream)
        row = stream_row(access.client, None, lid, secret=password(args))
        md = access.client.ledger_metadata(lid)
        row["state"] = md.state.name.lower()
        row["quorum"] = f"{md.ensemble_size}/{md.write_quorum}/{md.ack_quorum}"
        row["fragments"] = [[first, list(ens)] for first, ens in md.fragments]
    print_json(row)
    return 0


def write_record(entry: Entry, fmt: str) -> None:
    """One entry as ``stream read``/``tail`` print it: ``ledger read``'s forms."""
    write_entry(entry, "text" if fmt == "json" else fmt, fmt == "json")


def _read(args: argparse.Namespace) -> int:
    if args.count is not None and args.count < 0:
        raise ValueError(f"--count {args.count}: give a number of entries, 0 or more")
    if args.start is not None and args.start < 0:
        raise ValueError(f"--from {args.start}: give an entry id, 0 or more")
    with cli_access.cluster(args, readonly=True) as access:
        ul = _follower(access.client, args)
        lac = ul.read_last_add_confirmed()
        first = ul.first_entry_id() if args.start is None else args.start
        if args.from_time is not None:
            first = max(first, ul.entry_id_at(args.from_time))
        if args.to_time is not None:
            lac = min(lac, ul.entry_id_at(args.to_time) - 1)
        if first < ul.first_entry_id():
            raise ValueError(
                f"stream {args.stream}: --from {first} was trimmed; its first kept entry is "
                f"{ul.first_entry_id()} (leave out --from to start there)"
            )
        shown = 0
        if first <= lac:
            for entry in ul.entries(first, lac):
                if args.count is not None and shown >= args.count:
                    break
                write_record(entry, args.format)
                shown += 1
        ul.close()
    return 0


def _tail(args: argparse.Namespace) -> int:
    follow = args.metadata_uri is not None
    with cli_access.cluster(args, readonly=True) as access:
        ul = _follower(access.client, args)
        start: int | str = "latest" if args.new_only else "earliest"
        if args.from_time is not None:
            if args.new_only or args.cursor is not None:
                raise ValueError("give one of --from-time, --new-only and --cursor")
            start = ul.entry_id_at(args.from_time)
        timeout = args.idle if follow else 0
        tail = (
            ul.tail(cursor=args.cursor, timeout=timeout)
            if args.cursor is not None
            else ul.tail(start, timeout=timeout)
        )
        try:
            for entry in tail:
                write_record(entry, args.format)
                sys.stdout.flush()
        except KeyboardInterrupt:
            pass
        finally:
            tail.close()
            ul.close()
        if tail.skipped:
            print(f"skipped {tail.skipped} trimmed entry ids", file=sys.stderr)
    return 0


def _cursors(args: argparse.Namespace) -> int:
    with cli_access.cluster(args, readonly=True) as access:
        lid = stream_id(access.client, args.stream)
        row = stream_row(access.client, None, lid, secret=password(args), counted=False)
    cursors = row["cursors"]
    if args.json:
        print_json(cursors)
        return 0
    rows = [
        [c, v["position"], v["lag"], "-" if v["lag_seconds"] is None else v["lag_seconds"]]
        for c, v in sorted(cursors.items())
    ]
    print(table(["cursor", "position", "lag (entries)", "lag (seconds)"], rows))
    return 0


def _reset_cursor(args: argparse.Namespace) -> int:
    with cli_access.cluster(args, readonly=False) as access:
        ul = _follower(access.client, args)
        try:
            lac = ul.read_last_add_confirmed()
            if args.to_earliest:
                target = ul.first_entry_id() - 1
            elif args.to_latest:
                target = lac
            elif args.to_time is not None:
                target = ul.entry_id_at(args.to_time) - 1  # the next record taken is at T
            else:
                target = args.to_entry
                if target < -1 or target > lac:
                    raise ValueError(
                        f"--to-entry {target}: give a position from -1 (nothing read) to the "
                        f"stream's last add confirmed {lac}"
                    )
            current = ul.cursors().get(args.cursor)
            back = current is not None and target < current
            if back:
                question = (
                    f"move cursor {args.cursor!r} of stream {args.stream} back from {current} "
                    f"to {target}? Its consumer will take entries {target + 1}..{current} again"
                )
                if not confirm(question, yes=args.yes):
                    print("not moved", file=sys.stderr)
                    return 1
            ul.commit(args.cursor, target, force=back)
        finally:
            ul.close()
    print(f"cursor {args.cursor!r} of stream {args.stream}: {current} -> {target}")
    return 0


def _create(args: argparse.Namespace) -> int:
    from embedlog.unbounded.retention import Retention

    limits = (args.max_entries, args.max_bytes, args.max_age)
    retention = None if limits == (None, None, None) else Retention(*limits)
    with cli_access.cluster(args, readonly=False) as access:
        ul = access.client.create_unbounded(
            args.ensemble,
            args.write_quorum,
            args.ack_quorum,
            password=password(args),
            name=args.name,
            retention=retention,
            retention_overrides_cursors=args.retention_overrides_cursors,
            fragment_max_entries=args.fragment_max_entries,
            **({} if args.dedup_window is None else {"dedup_window": args.dedup_window}),
        )
        lid = ul.ledger_id
        ul.close()
    print(f"created stream {args.name} (ledger {lid})")
    return 0


def _delete(args: argparse.Namespace) -> int:
    with cli_access.cluster(args, readonly=False) as access:
        lid = stream_id(access.client, args.stream)
        if not args.yes:  # counted only to ask: --yes reads no entries
            row = stream_row(access.client, None, lid, secret=password(args))
            question = (
                f"delete stream {args.stream} (ledger {lid}: {row['entries_kept']} entries, "
                f"{row['bytes_kept']} payload bytes, {len(row['cursors'])} cursors)? Its "
                "entries and cursors are gone for good"
            )
            if not confirm(question, yes=False):
                print("not deleted", file=sys.stderr)
                return 1
        access.client.delete_ledger(lid)
    print(f"deleted stream {args.stream} (ledger {lid})")
    return 0


# -- the parser --------------------------------------------------------------------------------


def _target(p: argparse.ArgumentParser) -> None:
    cli_access.add_target_options(p, tls=False)
    p.add_argument(
        "--password-file",
        default=None,
        help="the stream's password (default: $EMBEDLOG_LEDGER_PASSWORD, else empty)",
    )


def _count(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def _window(text: str) -> float:
    """--dedup-window's seconds: 0 (appends take no msg_id) or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of seconds, 0 or more")
    return value


def _time_option(p: Any, flag: str, what: str) -> None:
    """A point in time on the command line (cli_access.point_in_time)."""
    p.add_argument(
        flag,
        type=cli_access.point_in_time,
        default=None,
        help=f"{what} (epoch seconds or ISO 8601, UTC unless it names a zone)",
    )


def add_stream_commands(sub: Any) -> None:
    stream = sub.add_parser(
        "stream", help="streams by name: list, read, tail, cursors, create, delete"
    ).add_subparsers(dest="stream_command", required=True)

    p = stream.add_parser(
        "list", help="every stream: entries and bytes kept, LAC, dedup window, retention, cursors"
    )
    _target(p)
    p.add_argument("--json", action="store_true", help="a JSON list instead of the table")
    p.set_defaults(func=_list)

    p = stream.add_parser("show", help="one stream as JSON: fragments, retention, cursors")
    _target(p)
    p.add_argument("stream", help="the stream's name (or ledger id)")
    p.set_defaults(func=_show)

    p = stream.add_parser("read", help="print a stream's entries (no-ops left out)")
    _target(p)
    p.add_argument("stream", help="the stream's name (or ledger id)")
    p.add_argument(
        "--from", dest="start", type=_count, default=None, help="first entry id (default: earliest)"
    )
    p.add_argument("--count", type=_count, default=None, help="at most this many entries")
    _time_option(p, "--from-time", "from the first record at or after this time")
    _time_option(p, "--to-time", "up to the last record before this time")
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="text (default), raw, json (with key, headers, time)",
    )
    p.set_defaults(func=_read)

    p = stream.add_parser(
        "tail",
        help="print a stream's entries as they come (a --data-dir prints what it holds)",
    )
    _target(p)
    p.add_argument("stream", help="the stream's name (or ledger id)")
    p.add_argument("--cursor", default=None, help="start after this cursor's position")
    p.add_argument("--new-only", action="store_true", help="only entries confirmed from now")
    _time_option(p, "--from-time", "from the first record at or after this time")
    p.add_argument(
        "--idle",
        type=cli_access.seconds,
        default=None,
        help="stop after this many seconds without a new entry (default: never; Ctrl-C)",
    )
    p.add_argument("--format", choices=FORMATS, default="text", help="text (default), raw, json")
    p.set_defaults(func=_tail)

    p = stream.add_parser("cursors", help="each cursor's position and lag (entries, seconds)")
    _target(p)
    p.add_argument("stream", help="the stream's name (or ledger id)")
    p.add_argument("--json", action="store_true", help="a JSON object instead of the table")
    p.set_defaults(func=_cursors)

    p = stream.add_parser(
        "reset-cursor", help="move a consumer's cursor (asks before moving it back)"
    )
    _target(p)
    p.add_argument("stream", help="the stream's name (or ledger id)")
    p.add_argument("cursor", help="the cursor's name")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="before the first kept entry")
    to.add_argument("--to-latest", action="store_true", help="at the last add confirmed")
    _time_option(to, "--to-time", "before the first record at or after this time")
    to.add_argument(
        "--to-entry", type=_count, default=None, help="at this entry id (-1: nothing read)"
    )
    p.add_argument("--yes", action="store_true", help="move it back without asking")
    p.set_defaults(func=_reset_cursor)

    p = stream.add_parser("create", help="create a named stream")
    _target(p)
    p.add_argument("name", help="the stream's name (unique in the cluster)")
    p.add_argument("--ensemble", type=_count, default=3, help="bookies per fragment (3)")
    p.add_argument("--write-quorum", type=_count, default=3, help="copies of each entry (3)")
    p.add_argument("--ack-quorum", type=_count, default=2, help="acks per append (2)")
    p.add_argument("--max-entries", type=_count, default=None, help="retention: entries kept")
    p.add_argument("--max-bytes", type=_count, default=None, help="retention: payload bytes")
    p.add_argument(
        "--max-age", type=cli_access.seconds, default=None, help="retention: seconds kept"
    )
    p.add_argument(
        "--retention-overrides-cursors",
        action="store_true",
        help="retention trims past cursors that lag behind",
    )
    p.add_argument("--fragment-max-entries", type=_count, default=None, help="entries per fragment")
    p.add_argument(
        "--dedup-window",
        type=_window,
        default=None,
        help="seconds an append's msg_id is remembered (default: create_unbounded's, 120; "
        "0: appends take no msg_id)",
    )
    p.set_defaults(func=_create)

    p = stream.add_parser("delete", help="delete a stream, its entries and cursors (asks)")
    _target(p)
    p.add_argument("stream", help="the stream's name (or ledger id)")
    p.add_argument("--yes", action="store_true", help="delete without asking")
    p.set_defaults(func=_delete)


__all__ = ["add_stream_commands", "stream_row"]
