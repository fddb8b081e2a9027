"""The settings of ``embedlog bookie run``: flags over a TOML config file, checked before
anything starts; every mistake is one line naming the setting and what to do.

The config file holds the command's own settings (``data_dir``, ``metadata_uri``,
``listen``, ``advertise``, ``id``, ``metadata_timeout``) and any bookie setting
(``BookieConfig``: ``flush_interval``, ``tls_cert``, ...), all at the top level.
A flag given on the command line wins over the file.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import attrs
from attrs import frozen

from embedlog.bookie.config import BookieConfig
from embedlog.transport.tcp import parse_address

# The command's own settings and the TOML types they take.
COMMAND_SETTINGS: dict[str, tuple[type, ...]] = {
    "data_dir": (str,),
    "metadata_uri": (str,),
    "listen": (str,),
    "advertise": (str,),
    "id": (str,),
    "metadata_timeout": (int, float),
}
# Set by the command itself (from --id, --data-dir, --advertise), never by the file.
_DERIVED = ("bookie_id", "data_dir", "address")
PATH_SETTINGS = ("data_dir", "tls_cert", "tls_key", "tls_ca")
WILDCARD_HOSTS = ("", "0.0.0.0", "::", "*")
DEFAULT_METADATA_TIMEOUT = 10.0


class SettingError(ValueError):
    """A bad setting of ``embedlog bookie run``: the message names it and the fix."""


@frozen
class RunSettings:
    data_dir: Path  # this bookie's own directory: journal/, ledgers/, index/ under it
    metadata_uri: str
    listen: tuple[str, int]
    advertise: str  # host:port, what clients connect to and the cookie records
    bookie_id: str | None  # None: the disks' (a restart) or derived from ``advertise``
    bookie: dict[str, Any]  # BookieConfig settings
    metadata_timeout: float = DEFAULT_METADATA_TIMEOUT


def bookie_setting_types() -> dict[str, tuple[type, ...]]:
    """BookieConfig's settings a config file may give, and the TOML types each takes."""
    by_annotation: dict[str, tuple[type, ...]] = {
        "bool": (bool,),
        "int": (int,),
        "float": (int, float),
        "str": (str,),
        "Path | None": (str,),
    }
    out = {}
    for a in attrs.fields(BookieConfig):
        if a.name in _DERIVED:
            continue
        kind = a.type if isinstance(a.type, str) else getattr(a.type, "__name__", str(a.type))
        out[a.name] = by_annotation[kind]
    return out


def check_type(name: str, value: Any, types: tuple[type, ...], where: str) -> None:
    """TOML gives bools where ints are expected too: a bool is only ever a bool."""
    ok = isinstance(value, types) and (bool in types or not isinstance(value, bool))
    if not ok:
        wanted = "a number" if float in types else " or ".join(t.__name__ for t in types)
        raise SettingError(f"{where}: setting {name} must be {wanted}, got {value!r}")


def read_config_file(path: Path) -> dict[str, Any]:
    """The settings in a TOML config file, each of a known name and type."""
    try:
        with path.open("rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise SettingError(f"config file {path} does not exist; check --config") from None
    except OSError as exc:
        raise SettingError(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingError(f"config file {path} is not valid TOML: {exc}") from None
    known = COMMAND_SETTINGS | bookie_setting_types()
    for name, value in doc.items():
        if name not in known:
            hint = " (it comes from --id)" if name == "bookie_id" else ""
            hint = hint or (" (it comes from --advertise)" if name == "address" else "")
            raise SettingError(
                f"config file {path}: unknown setting {name!r}{hint}; known: "
                f"{', '.join(sorted(known))}"
            )
        check_type(name, value, known[name], f"config file {path}")
    return doc


def advertised_address(listen: str, advertise: str | None) -> str:
    """What clients connect to: ``advertise``, else the listen address if it names a host."""
    host, _port = _address("--listen", listen)
    if advertise is None:
        if host in WILDCARD_HOSTS:
            raise SettingError(
                f"--listen {listen} listens on every interface, which is no address a client "
                "can connect to: give --advertise HOST:PORT (this host's name or IP)"
            )
        return listen
    a_host, _ = _address("--advertise", advertise)
    if a_host in WILDCARD_HOSTS:
        raise SettingError(f"--advertise {advertise}: give this host's name or IP, not a wildcard")
    return advertise


def _address(flag: str, address: str) -> tuple[str, int]:
    if address.rpartition(":")[2] == "0":
        raise SettingError(
            f"{flag} {address}: give a fixed port; a bookie keeps its address for life "
            "(its cookie records it)"
        )
    try:
        return parse_address(address)
    except ValueError:
        raise SettingError(f"{flag} {address!r} is not HOST:PORT") from None


def choose_bookie_id(given: str | None, on_disk: str | None, advertise: str) -> str:
    """The bookie's id: its disks' on a restart; ``given``; else its advertised address,
    as BookKeeper names a bookie by default."""
    if given is not None:
        if not given or "/" in given or given in (".", ".."):
            raise SettingError(f"--id {given!r}: a bookie id is a non-empty name without '/'")
        if on_disk is not None and on_disk != given:
            raise SettingError(
                f"these disks belong to bookie {on_disk} (their cookies say so), not {given}: "
                f"give --id {on_disk}, or another --data-dir for a new bookie"
            )
        return given
    return on_disk if on_disk is not None else advertise


def resolve(flags: dict[str, Any], config_file: Path | None) -> RunSettings:
    """Flags (None: not given) over the config file's settings."""
    settings: dict[str, Any] = {}
    if config_file is not None:
        settings = read_config_file(config_file)
        for name in PATH_SETTINGS:
            # A relative path in the file is relative to the file, wherever the command runs.
            if settings.get(name):
                settings[name] = str(config_file.parent / settings[name])
    settings.update({k: v for k, v in flags.items() if v is not None})
    for name in ("data_dir", "metadata_uri", "listen"):
        if not settings.get(name):
            raise SettingError(
                f"--{name.replace('_', '-')} is required (on the command line or as "
                f"{name} in the --config file)"
            )
    uri = str(settings["metadata_uri"])
    if not uri.startswith("zk://"):
        raise SettingError(
            f"--metadata-uri {uri!r}: a bookie server shares its metadata with clients in "
            "other processes: give the cluster's ZooKeeper, zk://host:port/path"
        )
    from embedlog.metadata.uri import parse_zk_uri

    try:
        parse_zk_uri(uri)
    except ValueError as exc:
        raise SettingError(str(exc)) from None
    timeout = float(settings.get("metadata_timeout", DEFAULT_METADATA_TIMEOUT))
    if timeout <= 0:
        raise SettingError(f"metadata_timeout must be > 0 seconds, got {timeout:g}")
    listen = str(settings["listen"])
    advertise = advertised_address(listen, settings.get("advertise"))
    bookie = {k: v for k, v in settings.items() if k not in COMMAND_SETTINGS}
    try:
        # Every bookie setting checked now (ranges, TLS files that go together).
        BookieConfig.from_settings("probe", Path("."), address=advertise, **bookie)
    except ValueError as exc:
        raise SettingError(str(exc)) from None
    return RunSettings(
        data_dir=Path(settings["data_dir"]),
        metadata_uri=uri,
        listen=_address("--listen", listen),
        advertise=advertise,
        bookie_id=settings.get("id"),
        bookie=bookie,
        metadata_timeout=timeout,
    )


def toml_value(value: Any) -> str:
    """One TOML value for a setting (for config files written by LocalCluster)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value) if value == value else "nan"
    if isinstance(value, str | Path):
        text = str(value)
        out = ['"']
        for ch in text:
            if ch in '"\\':
                out.append("\\" + ch)
            elif ord(ch) < 0x20 or ord(ch) == 0x7F:
                out.append(f"\\u{ord(ch):04x}")
            else:
                out.append(ch)
        out.append('"')
        return "".join(out)
    raise TypeError(f"no TOML form for {value!r}")


def config_text(settings: dict[str, Any]) -> str:
    """A config file holding ``settings`` (None values left out)."""
    return "".join(f"{k} = {toml_value(v)}\n" for k, v in settings.items() if v is not None)
