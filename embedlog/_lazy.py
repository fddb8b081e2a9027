"""Lazy package exports (PEP 562): a heavy module loads when one of its names is first used."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``.

    ``names`` maps each lazily exported name to the module that defines it. The first
    use imports that module and keeps the value in the package, so later uses are plain
    attribute reads.
    """

    def __getattr__(name: str) -> Any:
        try:
            module = names[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__


def lazy_dir(package: str, names: Mapping[str, str]) -> Callable[[], list[str]]:
    """A module ``__dir__`` for ``package`` (PEP 562): what it has loaded so far and the
    names it exports lazily, so ``dir()`` and completion show ``LocalCluster`` before
    its first use."""

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __dir__
