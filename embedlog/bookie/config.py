"""Bookie settings. Unknown or out-of-range settings fail loudly, naming the setting."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

import attrs
from attrs import field, frozen

from embedlog.transport import limits


def _positive(_inst: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if value <= 0:
        raise ValueError(f"bookie setting {attribute.name} must be > 0, got {value!r}")


def _optional_path(value: str | Path | None) -> Path | None:
    return None if value is None or value == "" else Path(value)


def _non_negative(_inst: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if value < 0:
        raise ValueError(f"bookie setting {attribute.name} must be >= 0, got {value!r}")


@frozen
class BookieConfig:
    bookie_id: str
    data_dir: Path = field(converter=Path)  # this bookie's own directory
    address: str = ""  # advertised address; "" means "inprocess:<bookie_id>"
    rack: str = "/default-rack"
    # Journal: every add (unless journal_write_data is False) and every state change.
    journal_write_data: bool = True
    # 0: write as soon as the journal is idle, grouping what arrives during an fsync;
    # > 0: also wait this long for company first (docs/performance.md).
    journal_max_group_wait: float = field(default=0.0, validator=_non_negative)  # seconds
    journal_group_bytes: int = field(default=512 * 1024, validator=_positive)
    journal_max_file_size: int = field(default=64 * 1024 * 1024, validator=_positive)
    # Ledger storage: write cache flushed to entry logs and the index.
    flush_interval: float = field(default=1.0, validator=_positive)  # seconds
    write_cache_max_bytes: int = field(default=64 * 1024 * 1024, validator=_positive)
    entry_log_max_size: int = field(default=256 * 1024 * 1024, validator=_positive)
    long_poll_max: float = field(default=10.0, validator=_positive)  # seconds
    readonly: bool = False
    # A flush that fails makes the bookie read-only and is retried, the wait doubling from
    # flush_interval up to this; writes resume once one succeeds (embedlog/bookie/flushing.py).
    flush_retry_max_interval: float = field(default=30.0, validator=_positive)  # seconds
    # What one TCP connection may cost the bookie (embedlog/transport/limits.py).
    max_connections: int = field(default=limits.DEFAULT_MAX_CONNECTIONS, validator=_positive)
    max_unsent_answer_bytes: int = field(
        default=limits.DEFAULT_MAX_UNSENT_ANSWER_BYTES, validator=_positive
    )
    max_requests_in_progress: int = field(
        default=limits.DEFAULT_MAX_REQUESTS_IN_PROGRESS, validator=_positive
    )
    idle_timeout: float = field(default=limits.DEFAULT_IDLE_TIMEOUT, validator=_positive)
    partial_frame_timeout: float = field(
        default=limits.DEFAULT_PARTIAL_FRAME_TIMEOUT, validator=_positive
    )
    # BP-46.
    auto_fix_cookies: bool = False
    # Phase two (repair from peers) in the background after a boot that needs it. False
    # leaves it for a later boot: a private copy booted only to be looked at (`embedlog
    # auditor check --data-dir`) must show the bookie as it is, not as repair makes it.
    run_repair: bool = True
    repair_retry_interval: float = field(default=1.0, validator=_positive)  # seconds
    # Seconds between garbage collection rounds: ledgers whose metadata is gone are dropped
    # (embedlog/bookie/gc.py); 0 turns it off.
    gc_interval: float = field(default=600.0, validator=_non_negative)
    # TLS on the TCP transport, from the operator's PEM files (docs/security.md). tls_cert
    # and tls_key turn it on; tls_ca verifies the client certificates presented, and
    # tls_require_client_cert refuses clients without one at the handshake.
    tls_cert: Path | None = field(default=None, converter=_optional_path)
    tls_key: Path | None = field(default=None, converter=_optional_path)
    tls_ca: Path | None = field(default=None, converter=_optional_path)
    tls_require_client_cert: bool = False
    # UNSAFE, for tests only: switch off BP-46's protections to show the data loss they prevent.
    unsafe_skip_fence_on_boot: bool = False
    unsafe_skip_limbo: bool = False
    # Issue #12, race 2 (the simulator's limbo-clears-at-first-resend): the old repair of an
    # open unbounded ledger, which cleared limbo up to the first add after the boot.
    unsafe_limbo_clears_at_first_resend: bool = False
    # No tombstones (embedlog/bookie/tombstones.py): a dropped ledger is forgotten, and the
    # next add of its old writer brings it back and is acknowledged (issue #27).
    unsafe_forget_deletions: bool = False

    def __attrs_post_init__(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            given, missing = (
                ("tls_cert", "tls_key") if self.tls_key is None else ("tls_key", "tls_cert")
            )
            raise ValueError(
                f"bookie setting {given} without {missing}: a bookie serving TLS needs its "
                "certificate and its private key (give both, or neither)"
            )
        if self.tls_require_client_cert and self.tls_ca is None:
            raise ValueError(
                "bookie setting tls_require_client_cert needs tls_ca: the CA certificate(s) "
                "client certificates must be signed by"
            )
        if self.tls_ca is not None and self.tls_cert is None:
            raise ValueError(
                "bookie setting tls_ca needs tls_cert and tls_key: a bookie that verifies "
                "client certificates serves a certificate of its own from your CA"
            )

    @property
    def tls(self) -> bool:
        """Whether the bookie serves TLS (with the operator's files)."""
        return self.tls_cert is not None

    # Computed once: a simulated history asks for them some 500 times a seed (boots, the
    # oracle), each a pathlib join otherwise (1.6% of a stream seed's CPU, cProfile).
    @cached_property
    def journal_dir(self) -> Path:
        return self.data_dir / "journal"

    @cached_property
    def ledger_dir(self) -> Path:
        return self.data_dir / "ledgers"

    @cached_property
    def index_dir(self) -> Path:
        return self.data_dir / "index"

    @property
    def advertised_address(self) -> str:
        return self.address or f"inprocess:{self.bookie_id}"

    @classmethod
    def from_settings(cls, bookie_id: str, data_dir: Path, **settings: Any) -> BookieConfig:
        """Build from keyword settings (LocalCluster's ``**bookie_config``), naming unknown keys."""
        known = {a.name for a in attrs.fields(cls)} - {"bookie_id", "data_dir"}
        unknown = sorted(set(settings) - known)
        if unknown:
            raise ValueError(
                f"unknown bookie setting(s): {', '.join(unknown)}; "
                f"known: {', '.join(sorted(known))}"
            )
        return cls(bookie_id=bookie_id, data_dir=data_dir, **settings)
