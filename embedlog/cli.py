"""The embedlog command line: simpletest, sandbox, chaos and the admin commands."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Sequence


def simpletest_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with simpletest's numbers, said as the fix (None: nothing)."""
    if args.entries < 1:
        return f"--entries {args.entries}: give 1 or more entries"
    if args.size < 0:
        return f"--size {args.size}: give a size in bytes, 0 or more"
    if args.bookies < 1:
        return f"--bookies {args.bookies}: give 1 or more bookies"
    if not 1 <= args.ensemble <= args.bookies:
        return f"--ensemble {args.ensemble}: give 1 to --bookies ({args.bookies})"
    if not 1 <= args.write_quorum <= args.ensemble:
        return f"--write-quorum {args.write_quorum}: give 1 to --ensemble ({args.ensemble})"
    if not 1 <= args.ack_quorum <= args.write_quorum:
        return f"--ack-quorum {args.ack_quorum}: give 1 to --write-quorum ({args.write_quorum})"
    return None


def _simpletest(args: argparse.Namespace) -> int:
    from embedlog import LocalCluster

    if problem := simpletest_problem(args):
        raise ValueError(problem)
    n, size = args.entries, args.size
    print(
        f"simpletest: {args.bookies} in-process bookies, ledger E{args.ensemble} "
        f"WQ{args.write_quorum} AQ{args.ack_quorum}, {n} entries of {size} bytes"
    )
    payloads = [
        os.urandom(8) + bytes(size - 8) if size >= 8 else os.urandom(size) for _ in range(n)
    ]
    with LocalCluster(num_bookies=args.bookies) as cluster:
        client = cluster.client("simpletest")
        wh = client.create_ledger(args.ensemble, args.write_quorum, args.ack_quorum)
        print(f"created ledger {wh.ledger_id} on {wh.metadata.ensembles[0]}")
        start = time.perf_counter()
        futures = []
        report_every = max(1, n // 10)
        for i, p in enumerate(payloads):
            futures.append(wh.add_async(p))
            if (i + 1) % report_every == 0:
                futures[-1].result()
                print(f"  written {i + 1}/{n}", flush=True)
        ids = [f.result() for f in futures]
        elapsed = time.perf_counter() - start
        if ids != list(range(n)):
            print("FAILED: entry ids are not 0..n-1 in order", file=sys.stderr)
            return 1
        wh.close()
        rate = n / elapsed if elapsed else float("inf")
        print(f"wrote {n} entries in {elapsed:.2f}s: {rate:,.0f} entries/s")
        start = time.perf_counter()
        rh = client.open_ledger(wh.ledger_id)
        entries = rh.read(0, n - 1) if n else []
        read_elapsed = time.perf_counter() - start
        bad = [e.entry_id for e, p in zip(entries, payloads, strict=False) if e.data != p]
        if len(entries) != n or bad:
            print(f"FAILED: read back {len(entries)} entries, {len(bad)} differ", file=sys.stderr)
            return 1
        read_rate = n / read_elapsed if read_elapsed else float("inf")
        print(
            f"read back and verified {n} entries in {read_elapsed:.2f}s: "
            f"{read_rate:,.0f} entries/s"
            + (f" ({read_rate / rate:.2f}x the write rate)" if 0 < rate < float("inf") else "")
        )
    print("simpletest: OK")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from embedlog import __version__

    parser = argparse.ArgumentParser(prog="embedlog", description=__doc__)
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    parser.add_argument("--version", action="version", version=f"embedlog {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    st = sub.add_parser(
        "simpletest",
        help="write, read back and verify on an in-process cluster",
        description="Start a cluster of in-process bookies in a temporary directory, write "
        "entries to one ledger (pipelined), read them back, verify them and print the rates.",
    )
    st.add_argument(
        "--entries", type=int, default=20000, help="how many entries to write (default 20000)"
    )
    st.add_argument("--size", type=int, default=1024, help="entry size in bytes (default 1024)")
    st.add_argument("--bookies", type=int, default=3, help="bookies in the cluster (default 3)")
    st.add_argument(
        "--ensemble", type=int, default=3, help="bookies the ledger is striped over (default 3)"
    )
    st.add_argument("--write-quorum", type=int, default=3, help="copies of each entry (default 3)")
    st.add_argument(
        "--ack-quorum",
        type=int,
        default=2,
        help="copies on disk before an add is confirmed (default 2)",
    )
    st.set_defaults(func=_simpletest)

    from embedlog import admin
    from embedlog.testing import chaos

    admin.add_commands(sub)
    chaos.add_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(argv) if argv is not None else sys.argv[1:]
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        if getattr(args, "metadata_uri", None) is not None:
            from embedlog.metadata.uri import check_uri_option

            check_uri_option(args.metadata_uri)
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        from embedlog.errors import BKError
        from embedlog.extras import MissingExtraError

        if isinstance(exc, BKError | ValueError | OSError | MissingExtraError):
            print(f"{command_name(args)}: error: {exc}", file=sys.stderr)
            return 2
        raise


def command_name(args: argparse.Namespace) -> str:
    """``embedlog ledger list``: the command as typed, for its error messages."""
    words = ["embedlog", args.command]
    words += [getattr(args, f"{args.command}_command", None) or ""]
    return " ".join(w for w in words if w)
