"""Optional dependencies: a missing one is named with the pip command that installs it.

The base install is what every embedded cluster needs; ZooKeeper metadata (kazoo)
and the Spark connector are extras. Code that needs an extra imports it through
``require`` so that its absence reads as an instruction, not a traceback.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# extra name -> the modules it installs that embedlog imports.
EXTRAS = {"zk": ("kazoo",), "spark": ("pyspark",)}


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message says which extra brings it."""


def install_command(extra: str) -> str:
    return f"pip install 'embedlog[{extra}]'"


def missing(extra: str, purpose: str, module: str) -> MissingExtraError:
    return MissingExtraError(
        f"{purpose} needs the {module!r} package, which is not installed: {install_command(extra)}",
        name=module,
    )


def require(extra: str, purpose: str) -> None:
    """Raise MissingExtraError naming ``extra`` unless every module it brings imports."""
    for module in EXTRAS[extra]:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is not None and exc.name.partition(".")[0] == module:
                raise missing(extra, purpose, module) from None
            raise


def import_for(extra: str, purpose: str, name: str) -> ModuleType:
    """Import ``name`` (an embedlog module built on ``extra``), or MissingExtraError."""
    require(extra, purpose)
    return importlib.import_module(name)


__all__ = ["EXTRAS", "MissingExtraError", "import_for", "install_command", "missing", "require"]
