"""open_store: the MetadataStore a ``metadata_uri`` names.

Accepted forms:

* ``None``: the embedded LevelDB store under ``data_dir / "metadata"`` (one process only);
* ``"memory://"``: an in-memory store (gone with the process);
* ``"zk://host:port[,host:port...]/chroot"``: ZooKeeper, the tree kept under
  ``/chroot`` (``/embedlog`` when the URI has no path). Several processes can
  share a cluster this way.
"""

from __future__ import annotations

from pathlib import Path

from embedlog.metadata.store import DEFAULT_METADATA_TIMEOUT, MetadataStore

ZK_FORM = "zk://host:port[,host:port...]/path"
ACCEPTED_FORMS = f"None (embedded LevelDB under data_dir/metadata), 'memory://', or '{ZK_FORM}'"


def _bad(uri: str, why: str, forms: str = ACCEPTED_FORMS) -> ValueError:
    return ValueError(f"unsupported metadata URI {uri!r}: {why}; accepted forms: {forms}")


def _zk_problem(uri: str) -> str | None:
    """What makes ``zk://...`` malformed, or None."""
    rest = uri[len("zk://") :]
    hosts, slash, path = rest.partition("/")
    chroot = "/" + path.rstrip("/") if slash else ""
    if "?" in hosts or "#" in hosts or "?" in path or "#" in path:
        return "query strings and fragments are not supported"
    if not hosts:
        return "no ZooKeeper host"
    for host in hosts.split(","):
        name, colon, port = host.rpartition(":")
        if not colon or not name or not port.isdigit() or not 0 < int(port) < 65536:
            return f"{host!r} is not host:port"
    if "//" in chroot:
        return f"empty path component in chroot {chroot!r}"
    return None


def parse_zk_uri(uri: str) -> tuple[str, str]:
    """``zk://h1:p1,h2:p2/chroot`` -> ("h1:p1,h2:p2", "/chroot"); ValueError if malformed."""
    if problem := _zk_problem(uri):
        raise _bad(uri, problem)
    hosts, slash, path = uri[len("zk://") :].partition("/")
    return hosts, "/" + path.rstrip("/") if slash else ""


def check_uri_option(uri: str, option: str = "--metadata-uri") -> None:
    """A command's ``--metadata-uri``: ZooKeeper only (other processes share nothing
    else; None and memory:// are for programs); ValueError saying what to give."""
    if not uri.startswith("zk://"):
        raise ValueError(f"{option} {uri!r} is not a ZooKeeper URI: {_GIVE_ZK}")
    if problem := _zk_problem(uri):
        raise ValueError(f"{option} {uri!r}: {problem}; {_GIVE_ZK}")


_GIVE_ZK = f"give the cluster's ZooKeeper, {ZK_FORM}"


def open_store(
    uri: str | None,
    data_dir: Path,
    *,
    readonly: bool = False,
    metadata_timeout: float = DEFAULT_METADATA_TIMEOUT,
) -> MetadataStore:
    """Open the metadata store ``uri`` names (see the module docstring for the forms).

    ``metadata_timeout``: how long a ZooKeeper store waits for ZooKeeper, to connect and
    then in each call, before raising MetadataUnavailableError (a MetadataError).

    ``readonly``: a view that refuses writes and creates nothing: no ZooKeeper chroot is
    made (a missing one raises NoNodeError), and an embedded store is read from a private
    copy (embedlog/metadata/readonly.py); a missing one raises MetadataError.
    """
    # Imports are local so that a process using one store never needs the others'
    # dependencies (kazoo is an optional extra).
    if uri is None:
        path = Path(data_dir) / "metadata"
        if readonly:
            from embedlog.errors import MetadataError
            from embedlog.metadata.readonly import open_leveldb_copy

            if not path.is_dir():
                raise MetadataError(f"no embedded metadata store at {path}")
            return open_leveldb_copy(path)
        from embedlog.metadata.leveldb_store import LevelDBMetadataStore

        return LevelDBMetadataStore(path)
    if not isinstance(uri, str):
        raise TypeError(f"metadata URI must be a str or None, not {type(uri).__name__}")
    store: MetadataStore
    if uri == "memory://":
        from embedlog.metadata.memory import MemoryMetadataStore

        store = MemoryMetadataStore()
    elif uri.startswith("zk://"):
        hosts, chroot = parse_zk_uri(uri)
        from embedlog.extras import require

        require("zk", f"ZooKeeper metadata ({uri})")
        from embedlog.metadata.zookeeper_store import DEFAULT_CHROOT, ZooKeeperMetadataStore

        store = ZooKeeperMetadataStore(
            hosts,
            chroot or DEFAULT_CHROOT,
            metadata_timeout=metadata_timeout,
            create_chroot=not readonly,
        )
    else:
        raise _bad(uri, "unknown scheme")
    if readonly:
        from embedlog.metadata.readonly import ReadOnlyStore

        return ReadOnlyStore(store)
    return store


__all__ = ["ACCEPTED_FORMS", "DEFAULT_METADATA_TIMEOUT", "open_store", "parse_zk_uri"]
