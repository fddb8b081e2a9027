"""Links between README.md and the pages of docs/ lead somewhere: the file exists and,
when the link names a section (``page.md#section``), the page has that heading."""

from __future__ import annotations

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
