"""tools/importlinter_acyclic.py: the import-linter contract CI runs against import cycles.

The graph functions are table-tested; then `lint-imports` runs the contract on small
packages written here, as CI runs it on embedlog (pyproject.toml [tool.importlinter]).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tools.importlinter_acyclic import cycles_of, strongly_connected

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("edges", "groups"),
    [
        ({}, []),
        ({"a": ["b"], "b": ["c"]}, []),  # a chain
        ({"a": ["a"]}, []),  # a module alone is no cycle of modules
        ({"a": ["b"], "b": ["a"]}, [["a", "b"]]),
        ({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}, [["a", "b", "c"]]),
        # two cycles joined by one import stay two groups
        ({"a": ["b"], "b": ["a", "c"], "c": ["d"], "d": ["c"]}, [["a", "b"], ["c", "d"]]),
        # two cycles sharing a module are one group
        ({"a": ["b", "c"], "b": ["a"], "c": ["a"]}, [["a", "b", "c"]]),
    ],
)
def test_groups_of_modules_that_import_each_other(
    edges: dict[str, list[str]], groups: list[list[str]]
) -> None:
    nodes = set(edges) | {m for targets in edges.values() for m in targets}
    assert strongly_connected(nodes, edges) == groups


def test_a_long_chain_is_no_trouble() -> None:
    # Deeper than Python's recursion limit: the search keeps its own stack.
    n = 5000
    edges = {f"m{i}": [f"m{i + 1}"] for i in range(n)}
    edges[f"m{n}"] = ["m0"]
    (group,) = strongly_connected(edges, edges)
    assert len(group) == n + 1


@pytest.mark.parametrize(
    ("group", "edges", "cycles"),
    [
        (["a", "b"], {"a": ["b"], "b": ["a"]}, [["a", "b", "a"]]),
        (
            ["a", "b", "c"],
            {"a": ["b", "c"], "b": ["a"], "c": ["a"]},
            [["a", "b", "a"], ["a", "c", "a"]],
        ),
        # the shortest way round from each module, each cycle named from its smallest module
        (
            ["a", "b", "c"],
            {"a": ["b"], "b": ["c", "a"], "c": ["a"]},
            [["a", "b", "a"], ["a", "b", "c", "a"]],
        ),
    ],
)
def test_cycles_named_in_a_group(
    group: list[str], edges: dict[str, list[str]], cycles: list[list[str]]
) -> None:
    assert cycles_of(group, edges) == cycles


def _package(tmp_path: Path, files: dict[str, str], config: str) -> Path:
    for name, text in {"pkg/__init__.py": "", **files}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text))
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent(config))
    return tmp_path


LINT_IMPORTS = "import sys, importlinter.cli as c; sys.exit(c.lint_imports_command())"


def _lint(where: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(where), str(ROOT)]), COLUMNS="300")
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, importlinter.cli as c; sys.exit(c.lint_imports_command())",
        ],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


CONFIG = """\
    [tool.importlinter]
    root_packages = ["pkg"]
    contract_types = ["acyclic: tools.importlinter_acyclic.AcyclicContract"]
    {extra}

    [[tool.importlinter.contracts]]
    name = "No import cycles"
    type = "acyclic"
    packages = ["pkg"]
    """

CYCLES = {
    # a function-local import still makes a cycle
    "pkg/a.py": "from pkg import b\n",
    "pkg/b.py": "def f():\n    from pkg import a\n",
    # so does one the type checker alone follows
    "pkg/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import d\n",
    "pkg/d.py": "from pkg import c\n",
    "pkg/e.py": "from pkg import a, c\n",
}


def test_lint_imports_fails_naming_each_cycle_and_its_imports(tmp_path: Path) -> None:
    done = _lint(_package(tmp_path, CYCLES, CONFIG.format(extra="")))
    assert done.returncode == 1, done.stdout + done.stderr
    out = " ".join(done.stdout.split())
    assert "No import cycles BROKEN" in out
    assert "Import cycle: 2 modules import each other: pkg.a, pkg.b" in out
    assert "pkg.a -> pkg.b -> pkg.a" in out
    assert "pkg.b -> pkg.a (l.2: from pkg import a)" in out
    assert "Import cycle: 2 modules import each other: pkg.c, pkg.d" in out
    assert "pkg.c -> pkg.d (l.3: from pkg import d)" in out
    assert "pkg.e" not in out.split("Broken contracts")[1]


def test_type_checking_imports_left_out_when_the_session_says_so(tmp_path: Path) -> None:
    extra = "exclude_type_checking_imports = true"
    done = _lint(_package(tmp_path, CYCLES, CONFIG.format(extra=extra)))
    assert done.returncode == 1, done.stdout + done.stderr
    out = " ".join(done.stdout.split())
    assert "pkg.a -> pkg.b -> pkg.a" in out
    assert "pkg.c" not in out.split("Broken contracts")[1]


def test_lint_imports_passes_a_package_without_cycles(tmp_path: Path) -> None:
    files = {"pkg/a.py": "from pkg import b\n", "pkg/b.py": "import json\n"}
    done = _lint(_package(tmp_path, files, CONFIG.format(extra="")))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No import cycles KEPT" in done.stdout


def test_excluded_modules_are_named_in_a_warning(tmp_path: Path) -> None:
    config = CONFIG.replace('packages = ["pkg"]', 'packages = ["pkg"]\n    exclude = ["pkg.c"]')
    done = _lint(_package(tmp_path, CYCLES, config.format(extra="")))
    assert done.returncode == 1, done.stdout + done.stderr
    out = " ".join(done.stdout.split())
    assert "pkg.a -> pkg.b -> pkg.a" in out
    assert "pkg.c, pkg.d" not in out
    assert "pkg.c is left out of this contract: its import cycles are not checked" in out
