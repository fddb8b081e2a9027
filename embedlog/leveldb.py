"""The LevelDB binding, whichever of the two is installed: one import for every LevelDB user.

plyvel publishes wheels up to Python 3.12 only; plyvel-next (module ``plyvel_next``) is
a maintained fork with the same API and wheels for 3.12 to 3.14 on Linux, macOS and
Windows. pyproject.toml installs plyvel on 3.11 and plyvel-next from 3.12 on, so an
install never needs a compiler or LevelDB's headers. When both are present, plyvel-next
is used: it is the one still maintained.

The names below are the binding's own (``DB``, ``Error``, ``IOError``,
``CorruptionError``, ...), so code written against plyvel switches by changing its
import to ``from embedlog import leveldb`` and ``plyvel.X`` to ``leveldb.X``.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

# In order of preference; see the module docstring.
BINDINGS = ("plyvel_next", "plyvel")
INSTALL_HINT = (
    "pip install plyvel-next (Python 3.12 and later) or pip install plyvel (Python 3.11); "
    "reinstalling embedlog installs the right one"
)


class LevelDBBindingMissing(ModuleNotFoundError):
    """Neither LevelDB binding is installed."""


def load(names: tuple[str, ...] = BINDINGS) -> ModuleType:
    """The first binding of ``names`` that imports; LevelDBBindingMissing if none does."""
    for name in names:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:  # the binding is there but broken: say so, do not hide it
                raise
    raise LevelDBBindingMissing(
        f"embedlog needs a LevelDB binding and found none of {', '.join(names)}: {INSTALL_HINT}",
        name=names[0],
    )


binding: ModuleType = load()
BINDING_NAME: str = binding.__name__

DB: Any = binding.DB
Error: Any = binding.Error
IOError: Any = binding.IOError  # the binding's own name (shadows the builtin alias): drop-in
CorruptionError: Any = binding.CorruptionError
destroy_db: Any = binding.destroy_db
repair_db: Any = binding.repair_db

__all__ = [
    "BINDINGS",
    "BINDING_NAME",
    "DB",
    "INSTALL_HINT",
    "CorruptionError",
    "Error",
    "IOError",
    "LevelDBBindingMissing",
    "binding",
    "destroy_db",
    "load",
    "repair_db",
]
