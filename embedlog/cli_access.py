"""How a command reaches the cluster its options name, read-only or to change it.

* ``--metadata-uri zk://host:port/path``: a running cluster whose bookies serve over
  TCP; the command is a client like any other. Read-only commands open the metadata
  read-only: a mistyped path is an error, never a new tree. ``--metadata-timeout
  SECONDS`` (default 10) bounds each wait for ZooKeeper: one that cannot be reached is
  a one-line error after that long.
* ``--data-dir DIR`` alone: a stopped LocalCluster's directory with the embedded
  metadata store. Read-only commands look at a private copy (embedlog/snapshot.py and
  embedlog/metadata/readonly.py) and leave DIR as it was; commands that change the
  cluster boot it here, for their duration.

A path that is not a cluster directory is a one-line error naming it and what to give
instead, before anything is opened or created.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attrs import frozen

if TYPE_CHECKING:
    from embedlog.client import Client
    from embedlog.metadata.client import MetadataClient
    from embedlog.runtime import Runtime
    from embedlog.transport.base import Transport

WHAT_TO_GIVE = (
    "give the directory of a LocalCluster (it holds metadata/ and bookie-N/), "
    "or --metadata-uri zk://host:port/path"
)


class WrongTargetError(ValueError):
    """The options name no cluster: a missing or wrong path, or no option at all."""


def add_target_options(p: argparse.ArgumentParser, *, tls: bool = True) -> None:
    p.add_argument(
        "--data-dir", default=None, help="a stopped LocalCluster's directory (embedded metadata)"
    )
    p.add_argument(
        "--metadata-uri",
        default=None,
        help="zk://host:port/path of a running cluster (bookies over TCP)",
    )
    add_timeout_option(p)
    if tls:
        p.add_argument("--tls-ca", default=None, help="CA certificate of TLS bookies")
        p.add_argument("--tls-cert", default=None, help="client certificate, for mutual TLS")
        p.add_argument("--tls-key", default=None, help="the private key of --tls-cert")


def seconds(text: str) -> float:
    """``--metadata-timeout``'s value: a number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of seconds above 0")
    return value


def point_in_time(text: str) -> float:
    """``--from-time``/``--to-time``: seconds since the epoch, or ISO 8601 (UTC unless it
    names a zone: 2026-11-27T10:00:00, 2026-11-27 10:00:00+01:00)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time: give seconds since the epoch or ISO 8601, "
            "e.g. 2026-11-27T10:00:00 (UTC) or 2026-11-27T10:00:00+01:00"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def add_timeout_option(p: argparse.ArgumentParser) -> None:
    """``--metadata-timeout``, for every command that takes ``--metadata-uri``."""
    from embedlog.metadata.uri import DEFAULT_METADATA_TIMEOUT

    p.add_argument(
        "--metadata-timeout",
        type=seconds,
        default=DEFAULT_METADATA_TIMEOUT,
        metavar="SECONDS",
        help="how long to wait for ZooKeeper, to connect and then in each call "
        f"(default {DEFAULT_METADATA_TIMEOUT:g})",
    )


def _timeout(args: argparse.Namespace) -> float:
    from embedlog.metadata.uri import DEFAULT_METADATA_TIMEOUT

    return float(getattr(args, "metadata_timeout", None) or DEFAULT_METADATA_TIMEOUT)


def cluster_dir(data_dir: str | None) -> Path:
    """``--data-dir`` checked: an existing directory with an embedded metadata store."""
    if data_dir is None:
        raise WrongTargetError(f"no cluster given: {WHAT_TO_GIVE}")
    path = Path(data_dir)
    if not path.exists():
        raise WrongTargetError(f"--data-dir {path} does not exist: {WHAT_TO_GIVE}")
    if not path.is_dir():
        raise WrongTargetError(f"--data-dir {path} is not a directory: {WHAT_TO_GIVE}")
    if not (path / "metadata").is_dir():
        raise WrongTargetError(
            f"--data-dir {path} holds no embedded metadata store ({path / 'metadata'} is "
            "missing): give a LocalCluster's directory; a sandbox or a cluster on ZooKeeper "
            "is reached with --metadata-uri zk://host:port/path"
        )
    return path


def bookie_dir(data_dir: Path, bookie_id: str) -> Path:
    path = data_dir / bookie_id
    if not path.is_dir():
        raise WrongTargetError(
            f"no bookie directory {path}: check --data-dir (the cluster's directory) and the "
            "bookie id"
        )
    return path


@contextlib.contextmanager
def metadata(args: argparse.Namespace, *, readonly: bool = True) -> Iterator[MetadataClient]:
    """The cluster's metadata (read-only unless asked), closed afterwards."""
    from embedlog.metadata.client import MetadataClient
    from embedlog.metadata.uri import open_store

    if args.metadata_uri is not None:
        store = open_store(
            args.metadata_uri, Path("."), readonly=readonly, metadata_timeout=_timeout(args)
        )
    else:
        store = open_store(None, cluster_dir(args.data_dir), readonly=readonly)
    try:
        yield MetadataClient(store)
    finally:
        store.close()


@frozen
class Access:
    """What a command works with: the metadata, the bookies' transport, the event loop
    they run on, and a client of the cluster."""

    metadata: MetadataClient
    transport: Transport
    runtime: Runtime
    client: Client


def _tls(args: argparse.Namespace) -> dict[str, Any]:
    return {k: getattr(args, k, None) for k in ("tls_ca", "tls_cert", "tls_key")}


@contextlib.contextmanager
def cluster(
    args: argparse.Namespace,
    *,
    readonly: bool,
    name: str = "embedlog-cli",
    request_timeout: float = 5.0,
) -> Iterator[Access]:
    """The cluster the options name, reachable for reads (``readonly``) or changes."""
    if args.metadata_uri is not None:
        from embedlog.connect import connect_with
        from embedlog.metadata.uri import open_store

        uri, timeout = args.metadata_uri, _timeout(args)
        client = connect_with(
            lambda: open_store(uri, Path("."), readonly=readonly, metadata_timeout=timeout),
            name=name,
            request_timeout=request_timeout,
            **_tls(args),
        )
        try:
            ctx = client.ctx
            yield Access(ctx.metadata, ctx.bookies.transport, client.runtime, client)
        finally:
            client.close()
        return
    data_dir = cluster_dir(args.data_dir)
    from embedlog.snapshot import bookie_dirs

    if not bookie_dirs(data_dir):
        raise WrongTargetError(f"--data-dir {data_dir} holds no bookies (bookie-N directories)")
    if readonly:
        from embedlog.snapshot import booted_copy

        with booted_copy(data_dir) as local:
            yield Access(local.metadata, local.transport, local.runtime, local.client(name))
        return
    from embedlog.cluster import LocalCluster

    with LocalCluster(0, data_dir) as local:
        yield Access(local.metadata, local.transport, local.runtime, local.client(name))


__all__ = [
    "Access",
    "WrongTargetError",
    "add_target_options",
    "add_timeout_option",
    "bookie_dir",
    "cluster",
    "cluster_dir",
    "metadata",
    "seconds",
]
