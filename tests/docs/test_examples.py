"""examples/ are what a user copies: they use only the public API (docs/api.md), and
every embedlog error they catch is in the reference's table of errors."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
# The modules docs/api.md documents; everything else under embedlog is internal.
PUBLIC_MODULES = frozenset(
    {"embedlog", "embedlog.aio", "embedlog.errors", "embedlog.auditor", "spark_connector"}
)
# What a client or cluster holds for embedlog's own machinery: its event loop and its
# context; and the *_aio coroutines behind the public methods.
INTERNAL_ATTRIBUTES = frozenset({"runtime", "ctx"})


def private_uses(source: str) -> list[str]:
    """Imports of internal modules and uses of internal members, as ``line: what``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [node.module]
        for module in modules:
            ours = module.partition(".")[0] in {"embedlog", "spark_connector"}
            if ours and module not in PUBLIC_MODULES:
                found.append(f"{node.lineno}: imports {module}")
        if isinstance(node, ast.Attribute):
            name = node.attr
            if (
                name in INTERNAL_ATTRIBUTES
                or name.endswith("_aio")
                or (name.startswith("_") and not name.startswith("__"))
            ):
                found.append(f"{node.lineno}: uses .{name}")
    return found


def caught_errors(source: str) -> set[str]:
    """The embedlog errors an example names in its ``except`` clauses."""
    import embedlog.errors

    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ExceptHandler) and node.type is not None:
            for sub in ast.walk(node.type):
                if isinstance(sub, ast.Name) and hasattr(embedlog.errors, sub.id):
                    names.add(sub.id)
    return names


def documented_errors() -> set[str]:
    """The errors in the table under docs/api.md's "Errors" heading."""
    text = (ROOT / "docs" / "api.md").read_text()
    section = text.split("\n## Errors\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`(\w+Error)`", row.split(" | ")[0])}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_examples_use_only_the_public_api(example: Path) -> None:
    assert private_uses(example.read_text()) == []


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_the_errors_examples_catch_are_documented(example: Path) -> None:
    assert caught_errors(example.read_text()) - documented_errors() == set()


def test_what_counts_as_private() -> None:
    source = (
        "import embedlog\n"
        "from embedlog.errors import BKError\n"
        "from embedlog.ledger.handles import ReadHandle\n"
        "import embedlog.client\n"
        "c = embedlog.connect('zk://h:1/x')\n"
        "c.runtime.run(c.stream_id_aio('x'))\n"
        "c._check_open()\n"
        "c.stream_id('x').__class__\n"
        "try:\n    pass\nexcept (BKError, KeyError):\n    pass\n"
    )
    assert sorted(private_uses(source)) == [
        "3: imports embedlog.ledger.handles",
        "4: imports embedlog.client",
        "6: uses .runtime",
        "6: uses .stream_id_aio",
        "7: uses ._check_open",
    ]
    assert caught_errors(source) == {"BKError"}
