"""``embedlog bookie decommission ID``: move a stopped bookie's data away and retire it.

With ``--metadata-uri`` the command is a client of a running cluster (the bookie to
retire stopped, the others serving). With ``--data-dir`` alone it boots a stopped
LocalCluster's bookies in this process for its duration, stops the one to retire
cleanly, and works as above.

Exit status: 0 retired, 1 some ledgers still list the bookie (named on stdout; run
again), 2 refused or an error, nothing changed by the refusal (named on stderr).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import Any

from embedlog.auditor.decommission import DEFAULT_WAIT_FOR_WRITERS


def add_decommission_command(bookie: Any) -> None:
    """Register ``decommission`` under ``embedlog bookie``."""
    from embedlog.cli_access import add_target_options

    p = bookie.add_parser(
        "decommission",
        help="move a stopped bookie's data to the other bookies and retire it",
        description="Copy every fragment that lists the bookie (closed, open and stream "
        "ledgers) to other bookies chosen by the placement policy, verify each copy, swap "
        "it into the metadata by compare-and-swap, then delete the bookie's cookie and "
        "registration so that it cannot rejoin. Stop the bookie first. Safe to interrupt "
        "and run again. Exit 1 when some ledgers could not be moved (named), 2 when refused.",
    )
    add_target_options(p)
    p.add_argument("bookie_id", help="the bookie to retire, e.g. bookie-3")
    p.add_argument(
        "--placement",
        choices=("rack-aware", "random"),
        default="rack-aware",
        help="placement policy choosing the replacements (default rack-aware)",
    )
    p.add_argument(
        "--wait-for-writers",
        type=float,
        default=DEFAULT_WAIT_FOR_WRITERS,
        metavar="SECONDS",
        help="how long open ledgers' writers get to move their last fragment off the bookie "
        f"(their next add does it; default {DEFAULT_WAIT_FOR_WRITERS:g})",
    )
    p.add_argument("--request-timeout", type=float, default=5.0, metavar="SECONDS")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=_decommission)


@contextlib.contextmanager
def _cluster(args: argparse.Namespace) -> Iterator[tuple[Any, Any, Any]]:
    """(metadata client, transport, runtime), the bookie to retire stopped."""
    from embedlog import cli_access

    if args.metadata_uri is not None:
        with cli_access.cluster(
            args, readonly=False, name="decommission", request_timeout=args.request_timeout
        ) as access:
            yield access.metadata, access.transport, access.runtime
        return
    from embedlog.cluster import LocalCluster

    data_dir = cli_access.cluster_dir(args.data_dir)
    cli_access.bookie_dir(data_dir, args.bookie_id)
    with LocalCluster(0, data_dir) as local:
        if args.bookie_id in local.running_bookies():
            local.stop_bookie(args.bookie_id)
        yield local.metadata, local.transport, local.runtime


def _decommission(args: argparse.Namespace) -> int:
    from embedlog.auditor.decommission import Decommissioner
    from embedlog.console import Progress
    from embedlog.ledger.placement import RackAwarePlacement, RandomPlacement

    bar = Progress("entries copied", enabled=not args.quiet)

    def progress(done: int, total: int, note: str) -> None:
        bar.update(done, total, note=note)

    placement = RackAwarePlacement() if args.placement == "rack-aware" else RandomPlacement()
    with _cluster(args) as (meta, transport, runtime):
        result = Decommissioner(
            meta,
            transport,
            runtime,
            args.bookie_id,
            placement=placement,
            request_timeout=args.request_timeout,
            wait_for_writers=args.wait_for_writers,
            progress=progress,
            say=bar.say,
        ).run()
    bar.close()
    for lid, problems in sorted(result.failures.items()):
        print(f"ledger {lid}: NOT moved: {'; '.join(problems)}")
    print(result.summary())
    return 0 if result.ok else 1
