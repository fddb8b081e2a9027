"""``embedlog auditor check``, ``embedlog auditor replicate`` and ``embedlog auditor run``.

Two ways to reach a cluster:

* ``--metadata-uri zk://host:port/path``: a running cluster whose bookies serve
  over TCP (``embedlog sandbox``, or LocalCluster(transport="tcp") with
  ZooKeeper metadata); the auditor connects like any client.
* ``--data-dir DIR`` alone: a stopped LocalCluster's directory with the embedded
  metadata store. ``check`` boots a private copy of it and leaves DIR as it was
  (embedlog/snapshot.py); ``replicate`` and ``run`` boot its bookies in this process
  for the duration of the command.

Exit status: 0 nothing found (check) or everything repaired (replicate), 1
violations found or left, 2 an error (named on stderr).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Iterator
from typing import Any

from embedlog.auditor.checker import DEFAULT_UNDERREPLICATED_THRESHOLD
from embedlog.stopsignals import POLL_SECONDS, StopSignals


def add_auditor_commands(sub: Any) -> None:
    auditor = sub.add_parser(
        "auditor", help="BP-34 metadata checker and re-replication"
    ).add_subparsers(dest="auditor_command", required=True)
    p = auditor.add_parser(
        "check",
        help="check every ledger against its bookies (BP-34): closed ones, and the sealed "
        "fragments of open ones",
        description="Report placement, durability, under-replication and bookie availability "
        "violations of every closed ledger and of every fragment but the last of open ones "
        "(the last is still being written). Exit 1 when any is found.",
    )
    _options(p)
    p.add_argument("--json", action="store_true", help="print the violations as JSON lines")
    p.set_defaults(func=_check)
    p = auditor.add_parser(
        "replicate",
        help="copy missing entries to the bookies that lack them; replace dead bookies",
        description="Check, then repair: copy entries a bookie lacks from a peer replica, "
        "replace bookies that do not answer (copy, then swap by metadata CAS), mark and "
        "unmark ledgers under-replicated. Exit 1 when something could not be repaired.",
    )
    _options(p)
    p.add_argument(
        "--no-replace",
        action="store_true",
        help="only copy to bookies that answer; leave silent bookies in their ensembles",
    )
    p.set_defaults(func=_replicate)
    p = auditor.add_parser(
        "run",
        help="the auditor as a daemon: check and repair every --interval seconds",
        description="Run a replicate pass (or, with --check-only, a check) now and then every "
        "--interval seconds, printing one summary line per pass, until stopped (Ctrl-C, SIGTERM) "
        "or --passes have run. A failed pass is reported and the next one runs on schedule.",
    )
    _options(p)
    p.add_argument("--interval", type=float, default=600.0, metavar="SECONDS", help="default 600")
    p.add_argument("--passes", type=int, default=None, help="stop after this many passes")
    p.add_argument("--check-only", action="store_true", help="report, never repair")
    p.add_argument("--no-replace", action="store_true", help="as for replicate")
    p.set_defaults(func=_run)


def _options(p: argparse.ArgumentParser) -> None:
    from embedlog.cli_access import add_target_options

    add_target_options(p)
    p.add_argument(
        "--ledger", type=int, action="append", default=None, help="only this ledger (repeatable)"
    )
    p.add_argument(
        "--placement",
        choices=("rack-aware", "random"),
        default="rack-aware",
        help="placement policy to check ensembles against (default rack-aware)",
    )
    p.add_argument(
        "--underreplicated-threshold",
        type=float,
        default=DEFAULT_UNDERREPLICATED_THRESHOLD,
        metavar="SECONDS",
        help="a ledger marked under-replicated longer than this is a violation (default 1 day)",
    )
    p.add_argument("--request-timeout", type=float, default=5.0, metavar="SECONDS")
    p.add_argument(
        "--recheck-delay",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="wait before asking silent bookies again (default 1)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")


@contextlib.contextmanager
def _cluster(args: argparse.Namespace, *, readonly: bool) -> Iterator[tuple[Any, Any, Any]]:
    """(metadata client, transport, runtime) of the cluster the arguments name."""
    from embedlog.cli_access import cluster

    with cluster(
        args, readonly=readonly, name="auditor", request_timeout=args.request_timeout
    ) as access:
        yield access.metadata, access.transport, access.runtime


def _policy(name: str) -> Any:
    from embedlog.ledger.placement import RackAwarePlacement, RandomPlacement

    return RackAwarePlacement() if name == "rack-aware" else RandomPlacement()


class _Progress:
    """The checker's progress as a bar on stderr (embedlog/console.py), plus messages."""

    def __init__(self, quiet: bool) -> None:
        from embedlog.console import Progress

        self.bar = Progress("ledgers checked", enabled=not quiet)

    def ledgers(self, done: int, total: int, ledger_id: int) -> None:
        self.bar.update(done, total, note=f"last: {ledger_id}")

    def say(self, message: str) -> None:
        self.bar.say(message)


def _checker_options(args: argparse.Namespace, progress: _Progress) -> dict[str, Any]:
    return dict(
        placement=_policy(args.placement),
        underreplicated_threshold=args.underreplicated_threshold,
        request_timeout=args.request_timeout,
        recheck_delay=args.recheck_delay,
    )


def _check(args: argparse.Namespace) -> int:
    from embedlog.auditor.checker import MetadataChecker

    progress = _Progress(args.quiet)
    with _cluster(args, readonly=True) as (meta, transport, runtime):
        checker = MetadataChecker(
            meta, transport, runtime, progress=progress.ledgers, **_checker_options(args, progress)
        )
        report = checker.run(args.ledger)
    for category, ledger_id, detail in report.violations:
        if args.json:
            print(json.dumps({"category": category, "ledger_id": ledger_id, "detail": detail}))
        else:
            print(f"{category}\t{ledger_id}\t{detail}")
    print(report.summary(), file=sys.stderr if args.json else sys.stdout)
    return 1 if report.violations else 0


def _replicate(args: argparse.Namespace) -> int:
    from embedlog.auditor.replication import Replicator

    progress = _Progress(args.quiet)
    options = _checker_options(args, progress)
    with _cluster(args, readonly=False) as (meta, transport, runtime):
        replicator = Replicator(
            meta,
            transport,
            runtime,
            placement=options.pop("placement"),
            request_timeout=options.pop("request_timeout"),
            replace_unavailable=not args.no_replace,
            progress=progress.say,
            **options,
        )
        result = replicator.run(args.ledger)
    for lid, repair in sorted(result.ledgers.items()):
        state = "repaired" if repair.repaired else "NOT repaired"
        parts = [f"{n} entries copied to {b}" for b, n in sorted(repair.copied.items())]
        parts += [f"{old} replaced by {new}" for old, new in sorted(repair.replaced.items())]
        parts += repair.failures
        print(f"ledger {lid}: {state}" + (": " + "; ".join(parts) if parts else ""))
    print(result.summary())
    return 0 if result.ok else 1


def _run(args: argparse.Namespace) -> int:
    from embedlog.auditor.periodic import PeriodicAuditor

    if args.passes is not None and args.passes < 1:
        raise ValueError(f"--passes must be >= 1, got {args.passes}")
    progress = _Progress(args.quiet)
    options = _checker_options(args, progress)
    if not args.check_only:
        options["replace_unavailable"] = not args.no_replace

    def report(outcome: Any) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        print(f"{stamp} {'check' if args.check_only else 'replicate'}: {outcome.summary()}")
        sys.stdout.flush()

    # The signals are taken first: a stop asked for while the cluster's clients start
    # still lets the first pass end cleanly (and Ctrl-C is never a traceback).
    with (
        StopSignals(repeat_message="stopping after the pass under way; please wait") as signals,
        _cluster(args, readonly=False) as (meta, transport, runtime),
    ):
        auditor = PeriodicAuditor(
            meta,
            transport,
            runtime,
            interval=args.interval,
            repair=not args.check_only,
            on_pass=report,
            **options,
        ).start()
        progress.say(f"auditor running: a pass every {args.interval:g}s (Ctrl-C stops it)")
        try:
            while not signals.stop.is_set():
                if args.passes is None:
                    signals.wait()
                elif auditor.wait_for_passes(args.passes, timeout=POLL_SECONDS):
                    break
            if signals.stop.is_set():
                progress.say("stopping after the pass under way")
        finally:
            auditor.stop()
    if auditor.last_error is not None:
        print(f"{auditor.errors} pass(es) failed; last error: {auditor.last_error}")
    return 0 if auditor.errors == 0 else 1
