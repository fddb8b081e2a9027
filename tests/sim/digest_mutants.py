"""Test-only mutants that skip the entries' digest check on one read path each: the
simulator's wire corruption (simnet.py, the ``*-corrupt`` scenarios) must then let a
corrupted entry through to a reader or a recovery, and an invariant must see it. A
mutant is a context manager patching the real code in this process (``run_seed``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from embedlog.ledger import batch_reads, recovery
from embedlog.unbounded import takeover
from embedlog.wire.entry import HEADER, Digester, EntryHeader


class _Unchecked(Digester):
    """A Digester whose ``unpack`` checks the ids but not the digest."""

    def unpack(
        self, entry: bytes | memoryview, ledger_id: int, entry_id: int
    ) -> tuple[EntryHeader, bytes]:
        header = self.unpack_header_only(bytes(entry), ledger_id, entry_id)
        return header, bytes(entry[HEADER.size + self.digest_len :])


def _unchecked(digester: Digester) -> Digester:
    return _Unchecked(digester.digest_type, digester.password)


@contextmanager
def _patched(*targets: tuple[Any, str, Callable[..., Any]]) -> Iterator[None]:
    saved = [(module, name, getattr(module, name)) for module, name, _ in targets]
    for module, name, wrap in targets:
        setattr(module, name, wrap(getattr(module, name)))
    try:
        yield
    finally:
        for module, name, before in saved:
            setattr(module, name, before)


def _digester_arg(index: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A wrapper that hands the function an unchecked copy of its ``index``-th argument."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        async def call(*args: Any, **kwargs: Any) -> Any:
            args = (*args[:index], _unchecked(args[index]), *args[index + 1 :])
            return await fn(*args, **kwargs)

        return call

    return wrap


def reads_skip_digest() -> Any:
    """Reads (READ_BATCH runs and single READs: readers, followers, the final reader)."""
    return _patched((batch_reads, "read_batched", _digester_arg(2)))


def recovery_skips_digest() -> Any:
    """Recovery reads (bounded recovery and stream takeovers) and their write-backs."""
    return _patched(
        (recovery, "read_forward", _digester_arg(3)),
        (takeover, "read_forward", _digester_arg(3)),
    )


MUTANTS: dict[str, Callable[[], Any]] = {
    "reads-skip-digest": reads_skip_digest,
    "recovery-skips-digest": recovery_skips_digest,
}
