"""The code samples of README.md and docs/**/*.md, found as a reader sees them.

A fenced block may be preceded (on the line before it, blank lines allowed) by one
directive comment, ``<!-- sample: WORD[; WORD ...] -->``, that says how it runs:

- ``skip: REASON`` — not run; the reason is required (few blocks should need one).
- ``continues`` — runs in the namespace (and directory) of the page's previous
  Python block: a page that builds a story over several blocks.
- ``cluster`` — starts with ``cluster`` (a started 3-bookie ``LocalCluster`` in the
  page's directory) and ``client = cluster.client("app")`` already defined.
- ``zookeeper`` — starts with ``uri``, a ``zk://`` URI of a real ZooKeeper with an
  empty path of its own.
- ``reference`` — a Python block of signatures (docs/api.md), not a program: it is not
  run, but every member it names on ``cluster``, ``client``, ``wh``, ``rh``, ``ul`` and
  ``cluster.network`` must exist on those objects.
- ``run`` — a shell block that is run (with bash, in the page's directory); other
  shell blocks are only checked: each ``embedlog`` command in them must name
  subcommands and options that exist.
- ``background`` (with ``run``) — a shell block that starts a server a reader leaves
  running (``embedlog sandbox``): the page goes on once it prints its ``... Ctrl-C to
  stop`` line, and it is stopped with Ctrl-C (SIGINT) after the page's last block; it
  must then exit 0. The URI it prints (``metadata URI: zk://...``) stands in for
  ``zk://127.0.0.1:PORT/embedlog`` in the page's later blocks, as a reader pastes it.

A Python block that defines ``test_*`` functions is a test file of a user's project:
it runs under pytest in a project of its own, and every test in it must pass.
"""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

from attrs import frozen

PYTHON = frozenset({"python", "py"})
SHELL = frozenset({"bash", "sh", "shell", "console", ""})
_FENCE = re.compile(r"^```\s*([\w+-]*)\s*$")
_DIRECTIVE = re.compile(r"^<!--\s*sample:\s*(.*?)\s*-->\s*$")
_WORDS = frozenset({"continues", "cluster", "zookeeper", "run", "background", "reference"})
# How a page writes the URI a background server prints (the reader pastes the real one).
SANDBOX_URI = "zk://127.0.0.1:PORT/embedlog"
_PREFIXES = (["embedlog"], ["python", "-m", "embedlog"], ["python3", "-m", "embedlog"])


class SampleError(ValueError):
    """A page's samples are malformed (an unknown directive, a skip without reason)."""


@frozen
class Sample:
    page: str  # the path as the repository names it, e.g. "docs/ledgers.md"
    line: int  # the line of the opening fence, 1-based
    lang: str
    code: str
    words: frozenset[str] = frozenset()
    skip: str | None = None  # the reason, when the block must not run

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def is_python(self) -> bool:
        return self.lang in PYTHON

    @property
    def is_shell(self) -> bool:
        return self.lang in SHELL

    @property
    def test_functions(self) -> list[str]:
        """Top-level ``test_*`` functions: the block is a pytest file when there are any."""
        tree = ast.parse(self.code)
        return [
            node.name
            for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
        ]


def parse_directive(text: str, where: str) -> tuple[frozenset[str], str | None]:
    """``"cluster; continues"`` -> ({"cluster", "continues"}, None); ``"skip: why; how"`` ->
    (set(), "why; how"). Unknown words and reasonless skips are errors, not silently ignored."""
    words: set[str] = set()
    skip: str | None = None
    # "skip" comes last and takes the rest of the text as its reason, semicolons included.
    head, found, reason = text.partition("skip")
    if found:
        skip = reason.lstrip(":").strip()
        if not skip:
            raise SampleError(f"{where}: 'skip' needs a reason: <!-- sample: skip: WHY -->")
    for part in (p.strip() for p in head.split(";")):
        if not part:
            continue
        if part in _WORDS:
            words.add(part)
        else:
            raise SampleError(f"{where}: unknown sample directive {part!r}")
    if "background" in words and "run" not in words:
        raise SampleError(f"{where}: 'background' is for shell blocks that 'run'")
    return frozenset(words), skip


def samples_of(text: str, page: str) -> list[Sample]:
    """Every fenced block of a Markdown text, with the directive that precedes it."""
    lines = text.splitlines()
    found: list[Sample] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        start = i
        end = start + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if end == len(lines):
            raise SampleError(f"{page}:{start + 1}: a code block is never closed")
        words: frozenset[str] = frozenset()
        skip = None
        before = start - 1
        while before >= 0 and not lines[before].strip():
            before -= 1
        if before >= 0 and (directive := _DIRECTIVE.match(lines[before].strip())):
            words, skip = parse_directive(directive.group(1), f"{page}:{start + 1}")
        code = "\n".join(lines[start + 1 : end]) + "\n"
        found.append(Sample(page, start + 1, opening.group(1).lower(), code, words, skip))
        i = end + 1
    return found


def shell_commands(code: str) -> list[list[str]]:
    """The ``embedlog`` (or ``python -m embedlog``) commands of a shell block, as argv
    after ``embedlog``: continuation lines joined, comments and ``host A:`` labels dropped.
    Lines that are not embedlog commands (pip, openssl, ...) are left out."""
    commands: list[list[str]] = []
    joined: list[str] = []
    pending = ""
    for raw in code.splitlines():
        line = pending + raw
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1] + " "
            continue
        pending = ""
        joined.append(line)
    for line in joined:
        line = re.sub(r"^\s*\$\s+", "", line)  # a prompt
        line = re.sub(r"^\s*[\w ]+:\s+(?=embedlog\b|python)", "", line)  # "host A: ..."
        for part in re.split(r"&&|;", line):
            try:
                words = shlex.split(part, comments=True)
            except ValueError:
                continue
            for prefix in _PREFIXES:
                if words[: len(prefix)] == prefix:
                    commands.append(words[len(prefix) :])
                    break
    return commands


_MEMBER = re.compile(r"(?<![\w.])((?:cluster\.network)|cluster|client|wh|rh|ul)\.(\w+)")


def members_named(code: str) -> set[tuple[str, str]]:
    """``("cluster", "stop_bookie")``, ``("cluster.network", "heal")``, ...: the members a
    reference block names on its usual variables (comments included: they name members
    too)."""
    return set(_MEMBER.findall(code))


_INLINE = re.compile(r"`((?:python3? -m )?embedlog [^`]+)`")
_FENCED = re.compile(r"^```.*?^```", re.M | re.S)


def inline_commands(text: str) -> list[list[str]]:
    """The ``embedlog`` commands a page writes in running text (`embedlog ledger list`),
    as argv after ``embedlog``; quoted error messages (``...: error: ...``) left out."""
    commands = []
    for span in _INLINE.findall(_FENCED.sub("", text)):
        if "error:" in span:
            continue
        try:
            words = shlex.split(span)
        except ValueError:
            continue
        commands.append(words[words.index("embedlog") + 1 :])
    return commands


def pages(root: Path) -> list[Path]:
    """README.md and every page under docs/, in a stable order."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
