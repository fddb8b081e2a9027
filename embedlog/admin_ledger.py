"""``embedlog ledger list|show|read|tail|recover|delete``.

list, show, read and tail only look: on a ``--data-dir`` they work on a private copy,
and they open ledgers without recovery (recovery fences the ledger and may close it).
recover and delete change the cluster; delete asks first.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embedlog import cli_access
from embedlog.console import Progress, print_json, table

if TYPE_CHECKING:
    from embedlog.ledger.entries import Entry
    from embedlog.ledger.handles import ReadHandle
    from embedlog.metadata.ledger_metadata import LedgerMetadata
    from embedlog.unbounded.ledger import UnboundedLedger

PASSWORD_ENV = "EMBEDLOG_LEDGER_PASSWORD"
READ_BATCH = 500  # entries a read asks for at once
FOLLOW_POLL = 0.5  # seconds between looks at a followed ledger's last add confirmed

# What admin output never shows: the ledger's password, and the master key derived from
# it, which is all a client needs to write to, fence or delete the ledger on its bookies.
SECRET_FIELDS = ("password", "password_hash")
HIDDEN = "<hidden>"


def public_metadata(md: LedgerMetadata) -> dict[str, Any]:
    """A ledger's metadata as ``ledger show`` prints it: every field, the secrets hidden."""
    doc: dict[str, Any] = json.loads(md.to_bytes())
    for name in SECRET_FIELDS:
        if name in doc:
            doc[name] = HIDDEN
    doc["version"] = md.version
    return doc


def entries_of(md: LedgerMetadata) -> int | None:
    """How many entries a ledger holds: known once it is closed, else None."""
    return md.last_entry_id + 1 if md.is_closed else None


def summary_row(md: LedgerMetadata) -> dict[str, Any]:
    """One ledger as ``ledger list`` shows it (the JSON form; the table shows the same)."""
    return {
        "ledger_id": md.ledger_id,
        "state": md.state.name.lower(),
        "entries": entries_of(md),
        "quorum": f"{md.ensemble_size}/{md.write_quorum}/{md.ack_quorum}",
        "ensemble": list(md.last_fragment[1]),
        "fragments": len(md.fragments),
        "kind": "unbounded" if md.unbounded else "bounded",
        "digest": md.digest_type.name.lower(),
    }


LIST_COLUMNS = ("LEDGER", "STATE", "ENTRIES", "E/WQ/AQ", "ENSEMBLE", "FRAGMENTS", "KIND")


def _table_row(row: dict[str, Any]) -> list[object]:
    entries = row["entries"] if row["entries"] is not None else "-"
    return [
        row["ledger_id"],
        row["state"],
        entries,
        row["quorum"],
        ",".join(row["ensemble"]),
        row["fragments"],
        row["kind"],
    ]


def _list(args: argparse.Namespace) -> int:
    rows = []
    with cli_access.metadata(args) as meta:
        ids = list(meta.list_ledgers())
        progress = Progress("ledgers", len(ids), enabled=sys.stderr.isatty())
        for n, lid in enumerate(ids, 1):
            rows.append(summary_row(meta.read_ledger(lid)))
            progress.update(n)
        progress.close()
    if args.json:
        print_json(rows)
    else:
        print(table(LIST_COLUMNS, [_table_row(r) for r in rows]))
    return 0


def _show(args: argparse.Namespace) -> int:
    with cli_access.metadata(args) as meta:
        md = meta.read_ledger(args.ledger_id)
    print_json(public_metadata(md))
    return 0


# -- reading entries ---------------------------------------------------------------------------


def password(args: argparse.Namespace) -> bytes:
    """--password-file's bytes (one trailing newline dropped), else $EMBEDLOG_LEDGER_PASSWORD.

    Never a command-line argument: other users of the machine see those in ``ps``.
    """
    if args.password_file is not None:
        try:
            data = Path(args.password_file).read_bytes()
        except OSError as exc:
            why = (exc.strerror or str(exc)).lower()
            raise ValueError(
                f"--password-file {args.password_file}: {why}; give the file that holds the "
                f"ledger's password, or set ${PASSWORD_ENV} instead"
            ) from None
        return data[:-1] if data.endswith(b"\n") else data
    return os.environb.get(PASSWORD_ENV.encode(), b"")


def printable(data: bytes) -> str:
    """A payload on one line: UTF-8 text as it is, anything else escaped as in Python."""
    text = data.decode("utf-8", errors="backslashreplace")
    out = []
    for ch in text:
        if ch == "\\" or ch.isprintable():
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def write_entry(entry: Entry, fmt: str, as_json: bool) -> None:
    data = bytes(entry.data)
    if as_json:
        doc: dict[str, object] = {"entry_id": entry.entry_id, "size": len(data)}
        doc["data_base64"] = base64.b64encode(data).decode("ascii")
        doc.update(record_fields(entry))
        print(json.dumps(doc))
    elif fmt == "raw":
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    elif fmt == "hex":
        print(f"{entry.entry_id}\t{data.hex()}")
    elif fmt == "base64":
        print(f"{entry.entry_id}\t{base64.b64encode(data).decode('ascii')}")
    else:
        print(f"{entry.entry_id}\t{printable(data)}")


def record_fields(entry: Entry) -> dict[str, object]:
    """A stream record's fields as JSON shows them (none for bare entries): the time in
    seconds and as UTC ISO 8601, key, header values and msg_id in base64."""
    doc: dict[str, object] = {}
    if entry.timestamp is not None:
        doc["timestamp"] = entry.timestamp
        doc["time"] = datetime.fromtimestamp(entry.timestamp, UTC).isoformat()
    if entry.key is not None:
        doc["key_base64"] = base64.b64encode(entry.key).decode("ascii")
    if entry.headers:
        doc["headers_base64"] = {
            name: base64.b64encode(value).decode("ascii") for name, value in entry.headers.items()
        }
    if entry.msg_id is not None:
        doc["msg_id_base64"] = base64.b64encode(entry.msg_id).decode("ascii")
    return doc


def read_range(handle: ReadHandle | StreamView, first: int, last: int) -> Iterator[Entry]:
    for start in range(first, last + 1, READ_BATCH):
        yield from handle.read(start, min(last, start + READ_BATCH - 1))


def ledger_or_stream(text: str) -> int | str:
    """A ledger given on the command line: its id, or a stream's name."""
    return int(text) if text.isdigit() else text


class StreamView:
    """A stream read as ``ledger read``/``ledger tail`` read a ledger: through a follower
    (it never disturbs the writer), so entries come without their term prefix and the
    takeovers' no-op entries are left out; ids below the first kept entry are skipped."""

    is_closed = False

    def __init__(self, ul: UnboundedLedger) -> None:
        self.ul = ul
        self.last_add_confirmed = ul.read_last_add_confirmed()
        self.first_kept = ul.first_entry_id()
        self.told = False

    def read(self, first: int, last: int) -> list[Entry]:
        if first < self.first_kept and not self.told:
            self.told = True
            print(f"entries below {self.first_kept} were trimmed", file=sys.stderr)
        first = max(first, self.first_kept)
        return self.ul.read(first, last) if first <= last else []

    def read_last_add_confirmed(self) -> int:
        self.last_add_confirmed = self.ul.read_last_add_confirmed()
        return self.last_add_confirmed


def _open(access: cli_access.Access, args: argparse.Namespace) -> ReadHandle | StreamView:
    client = access.client
    if isinstance(args.ledger_id, str):
        args.ledger_id = client.stream_id(args.ledger_id)
    if client.ledger_metadata(args.ledger_id).unbounded:
        return StreamView(
            client.open_unbounded(args.ledger_id, password=password(args), takeover=False)
        )
    # recover=False: a look must not fence or close a ledger someone may be writing.
    return client.open_ledger(args.ledger_id, password=password(args), recover=False)


def _print_range(
    handle: ReadHandle | StreamView, first: int, last: int, args: argparse.Namespace
) -> int:
    total = max(0, last - first + 1)
    progress = Progress("entries", total, enabled=sys.stderr.isatty() and total > READ_BATCH)
    done = 0
    for entry in read_range(handle, first, last):
        write_entry(entry, args.format, args.json)
        done += 1
        progress.update(done)
    progress.close()
    return done


def _read(args: argparse.Namespace) -> int:
    # Before anything is opened: these need no cluster to be wrong.
    if args.first < 0:
        raise ValueError(f"--first {args.first}: give an entry id, 0 or more")
    if args.last is not None and args.last < args.first:
        raise ValueError(
            f"--first {args.first} is after --last {args.last}: give --first <= --last"
        )
    with cli_access.cluster(args, readonly=True) as access:
        handle = _open(access, args)
        lac = handle.last_add_confirmed
        last = lac if args.last is None else args.last
        end = "last entry" if handle.is_closed else "last add confirmed"
        if args.last is not None and args.last > lac:
            raise ValueError(f"ledger {args.ledger_id}: --last {args.last} is past its {end} {lac}")
        if args.first > lac and args.first > 0:
            # An empty ledger read from 0 prints nothing, as it should; --first past the
            # end printing nothing looks like a ledger with no entries.
            raise ValueError(
                f"ledger {args.ledger_id}: --first {args.first} is past its {end} {lac}"
            )
        _print_range(handle, args.first, last, args)
    return 0


def _tail(args: argparse.Namespace) -> int:
    if args.follow and args.metadata_uri is None:
        raise cli_access.WrongTargetError(
            "--follow needs a running cluster (--metadata-uri zk://host:port/path): nothing "
            "writes to a stopped cluster's directory"
        )
    if args.lines < 0:
        raise ValueError(f"-n must be >= 0, got {args.lines}")
    with cli_access.cluster(args, readonly=True) as access:
        handle = _open(access, args)
        lac = handle.last_add_confirmed
        _print_range(handle, max(0, lac - args.lines + 1), lac, args)
        if not args.follow:
            return 0
        from embedlog.errors import MetadataUnavailableError

        waiting = False  # for ZooKeeper: said once per outage, as a stream's tail does
        try:
            while not handle.is_closed:
                try:
                    new = handle.read_last_add_confirmed()
                except MetadataUnavailableError:
                    if not waiting:  # the store's own warning says why
                        print("waiting for the metadata store to answer again", file=sys.stderr)
                    waiting = True
                    time.sleep(FOLLOW_POLL)
                    continue
                if waiting:
                    print("the metadata store answers again; following on", file=sys.stderr)
                    waiting = False
                if new > lac:
                    _print_range(handle, lac + 1, new, args)
                    lac = new
                elif not handle.is_closed:
                    time.sleep(FOLLOW_POLL)
        except KeyboardInterrupt:
            return 0
        print(f"ledger {args.ledger_id} is closed", file=sys.stderr)
    return 0


# -- changing ledgers --------------------------------------------------------------------------


def _recover(args: argparse.Namespace) -> int:
    with cli_access.cluster(args, readonly=False) as access:
        handle = access.client.open_ledger(args.ledger_id, password=password(args), recover=True)
        row = summary_row(handle.metadata)
    if args.json:
        print_json(row)
    else:
        print(
            f"ledger {args.ledger_id}: {row['state']}, last entry {handle.last_add_confirmed} "
            f"({row['entries']} entries)"
        )
    return 0


def confirm(question: str, *, yes: bool) -> bool:
    """True to go ahead: ``--yes``, or "y" typed at the terminal. Without a terminal to ask
    on, and without --yes, the answer is an error: a script must say --yes itself. The
    question goes to stderr: with stdout sent to a file (``... > out``) it is still seen."""
    if yes:
        return True
    if not sys.stdin.isatty():
        raise ValueError(f"{question.split('?')[0]}: no terminal to ask on; pass --yes")
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline()  # "" at the end of input: no
    return answer.strip().lower() in ("y", "yes")


def _delete(args: argparse.Namespace) -> int:
    with cli_access.cluster(args, readonly=False) as access:
        md = access.client.ledger_metadata(args.ledger_id)
        row = summary_row(md)
        entries = row["entries"] if row["entries"] is not None else "unknown"
        question = (
            f"delete ledger {args.ledger_id} ({row['state']}, {entries} entries, on "
            f"{', '.join(sorted(md.bookies()))})? Its entries are gone for good"
        )
        if not confirm(question, yes=args.yes):
            print("not deleted", file=sys.stderr)
            return 1
        access.client.delete_ledger(args.ledger_id)
    print(f"deleted ledger {args.ledger_id}")
    return 0


# -- the parser --------------------------------------------------------------------------------


def _reading(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--format",
        choices=("text", "hex", "base64", "raw"),
        default="text",
        help="text: '<entry id><TAB><payload>' with non-text bytes escaped (default); hex, "
        "base64: the payload so encoded; raw: the payloads' bytes alone, back to back",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per entry: entry_id, size, data_base64",
    )
    p.add_argument(
        "--password-file",
        default=None,
        help=f"the ledger's password (default: ${PASSWORD_ENV}, else empty)",
    )


def add_ledger_commands(sub: Any) -> None:
    ledger = sub.add_parser("ledger", help="inspect, read and manage ledgers").add_subparsers(
        dest="ledger_command", required=True
    )
    p = ledger.add_parser("list", help="every ledger: state, entries, quorum, ensemble")
    cli_access.add_target_options(p, tls=False)
    p.add_argument("--json", action="store_true", help="a JSON list instead of the table")
    p.set_defaults(func=_list)

    p = ledger.add_parser("show", help="one ledger's metadata (JSON; secrets hidden)")
    cli_access.add_target_options(p, tls=False)
    p.add_argument("ledger_id", type=int)
    p.set_defaults(func=_show)

    p = ledger.add_parser(
        "read",
        help="print a ledger's entries (no recovery: an open ledger up to its LAC)",
        description="Print entries --first..--last (default: all there are). An open ledger "
        "is read up to its last add confirmed and left open: reading never fences or closes.",
    )
    cli_access.add_target_options(p)
    p.add_argument(
        "ledger_id", metavar="LEDGER", type=ledger_or_stream, help="a ledger id or a stream's name"
    )
    p.add_argument("--first", type=int, default=0, help="first entry (default 0)")
    p.add_argument("--last", type=int, default=None, help="last entry (default: the last one)")
    _reading(p)
    p.set_defaults(func=_read)

    p = ledger.add_parser(
        "tail",
        help="print a ledger's last entries; --follow prints new ones as they come",
        description="Print the last -n entries (up to the last add confirmed of an open "
        "ledger). --follow then prints entries as they are confirmed, until the ledger is "
        "closed or Ctrl-C; it needs --metadata-uri (a running cluster).",
    )
    cli_access.add_target_options(p)
    p.add_argument(
        "ledger_id", metavar="LEDGER", type=ledger_or_stream, help="a ledger id or a stream's name"
    )
    p.add_argument("-n", "--lines", type=int, default=10, help="how many (default 10)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new entries")
    _reading(p)
    p.set_defaults(func=_tail)

    p = ledger.add_parser(
        "recover",
        help="recover and close a ledger whose writer is gone (fences it)",
        description="Fence the ledger on its bookies, find its last entry and close it, as a "
        "reader opening it with recovery does. A writer still adding to it is stopped.",
    )
    cli_access.add_target_options(p)
    p.add_argument("ledger_id", type=int)
    p.add_argument("--json", action="store_true", help="the recovered ledger as JSON")
    p.add_argument("--password-file", default=None, help=f"as for read (default ${PASSWORD_ENV})")
    p.set_defaults(func=_recover)

    p = ledger.add_parser(
        "delete",
        help="delete a ledger: its metadata and its entries on every bookie (asks first)",
        description="Delete the ledger's metadata, then ask its bookies to drop its entries. "
        "Asks for confirmation on the terminal; without one, only with --yes.",
    )
    cli_access.add_target_options(p)
    p.add_argument("ledger_id", type=int)
    p.add_argument("-y", "--yes", action="store_true", help="do not ask")
    p.set_defaults(func=_delete)


__all__ = ["add_ledger_commands", "public_metadata", "summary_row"]
