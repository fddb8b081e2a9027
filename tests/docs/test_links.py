"""Links between README.md and the pages of docs/ lead somewhere: the file exists and,
when the link names a section (``page.md#section``), the page has that heading."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest
from samples import pages

ROOT = Path(__file__).resolve().parents[2]
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$", re.M)
_FENCED = re.compile(r"^```.*?^```", re.M | re.S)


def anchor(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to
    hyphens (``"Client limits"`` -> ``client-limits``)."""
    text = re.sub(r"[`*_]", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {anchor(h) for h in _HEADING.findall(_FENCED.sub("", page.read_text()))}


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in _LINK.findall(_FENCED.sub("", page.read_text())):
        if re.match(r"^[a-z]+:", target):  # http:, mailto: ...: not ours to check
            continue
        path, _, section = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif section and dest.suffix == ".md" and section not in anchors(dest):
            broken.append(f"{target}: {dest.name} has no heading #{section}")
    return broken


# A file named in running text (`embedlog/dirlock.py`, docs/protocol.md, ../x/*.md):
# a path of one or more parts ending in a file name with an extension we write about.
_MENTION = re.compile(
    r"(?<![\w/.:*-])((?:\.\./)*(?:[\w.*-]+/)*[\w*-]+\.(?:md|py|sh|toml|cfg|in))(?![\w/])"
)
_LINK_WHOLE = re.compile(r"\[[^\]]*\]\([^)]*\)")
_SKIP_DIRS = {".git", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}


def repository_files(root: Path) -> list[str]:
    """Every file under ``root`` as a relative POSIX path (caches and .git left out)."""
    return [
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and not _SKIP_DIRS & set(p.relative_to(root).parts)
    ]


def names_a_file(mention: str, page: Path, root: Path, files: list[str]) -> bool:
    """Whether a mention names a file of the repository: relative to the page when it
    starts with ``../``; else a file whose path ends with it (`bookie/adds.py` is
    embedlog/bookie/adds.py). ``*`` matches as in a shell."""
    if mention.startswith("../"):
        target = (page.parent / mention).resolve()
        if not target.is_relative_to(root.resolve()):
            return False  # outside the repository: a reader of a clone has no such file
        mention = target.relative_to(root.resolve()).as_posix()
        return any(fnmatch.fnmatchcase(f, mention) for f in files)
    return any(
        fnmatch.fnmatchcase(f, mention) or fnmatch.fnmatchcase(f, "*/" + mention) for f in files
    )


def missing_mentions(page: Path, root: Path, files: list[str]) -> list[str]:
    """Files the page's running text names that the repository does not have. Code
    blocks are left out (their paths are a user's), and so are links: broken_links
    checks those."""
    text = _LINK_WHOLE.sub("", _FENCED.sub("", page.read_text()))
    mentions = sorted(set(_MENTION.findall(text)))
    return [m for m in mentions if not names_a_file(m, page, root, files)]


@pytest.mark.parametrize(
    ("heading", "expected"),
    [
        ("Client limits", "client-limits"),
        (
            "Phase one (before the bookie serves anything)",
            "phase-one-before-the-bookie-serves-anything",
        ),
        ("`embedlog bookie run`", "embedlog-bookie-run"),
        ("Following: tail()", "following-tail"),
    ],
)
def test_anchor(heading, expected):
    assert anchor(heading) == expected


@pytest.mark.parametrize("page", pages(ROOT), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_links_lead_somewhere(page):
    assert broken_links(page) == []


def test_a_broken_link_is_found(tmp_path):
    page = tmp_path / "p.md"
    (tmp_path / "q.md").write_text("# Title\n\n## A section\n")
    page.write_text("[ok](q.md#a-section) [gone](nothing.md) [bad](q.md#nope) [web](https://x)\n")
    assert broken_links(page) == [
        "nothing.md: no such file",
        "q.md#nope: q.md has no heading #nope",
    ]


@pytest.fixture(scope="module")
def files() -> list[str]:
    return repository_files(ROOT)


@pytest.mark.parametrize("page", pages(ROOT), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_files_named_in_the_text_exist(page, files):
    assert missing_mentions(page, ROOT, files) == []


def test_a_file_named_but_missing_is_found(tmp_path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "sub" / "mod.py").write_text("")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text("")
    page = tmp_path / "docs" / "p.md"
    page.write_text(
        "See `sub/mod.py`, pkg/sub/*.py, other.md, ../docs/other.md, [link](gone.md),\n"
        "and docs/protocol.md, API.md, shared/seeds/*.md, ../../outside/x.md, e.g. `x.py`.\n"
        "```\nnot/checked.md\n```\n"
    )
    files = repository_files(tmp_path)
    assert missing_mentions(page, tmp_path, files) == [
        "../../outside/x.md",
        "API.md",
        "docs/protocol.md",
        "shared/seeds/*.md",
        "x.py",
    ]
