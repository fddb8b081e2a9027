"""What pyproject.toml and MANIFEST.in promise a user of the sdist or wheel: the license
as an SPDX expression (PEP 639), the files README.md links to, a pandas PySpark 4
supports. (Building the sdist needs setuptools >= 77 from the network; CI's install
does it, and these checks keep the configuration that it builds from honest.)"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_license_is_an_spdx_expression_without_classifiers() -> None:
    project = PYPROJECT["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"] and (ROOT / "LICENSE").is_file()
    assert not [c for c in project["classifiers"] if c.startswith("License ::")]
    (setuptools,) = [
        Requirement(r) for r in PYPROJECT["build-system"]["requires"] if r.startswith("setup")
    ]
    # PEP 639's license and license-files came with setuptools 77.
    assert not setuptools.specifier.contains(Version("76.9")), setuptools
    assert setuptools.specifier.contains(Version("77.0"))


def test_the_spark_extra_keeps_pandas_below_3() -> None:
    spark = [Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"]["spark"]]
    (pandas,) = [r for r in spark if r.name == "pandas"]
    assert pandas.specifier.contains(Version("2.3.3"))
    assert not pandas.specifier.contains(Version("3.0.0"))


def _sdist_dirs() -> set[str]:
    """Top-level directories the sdist carries: the packages and MANIFEST.in's grafts."""
    grafts = re.findall(r"^graft\s+(\S+)\s*$", (ROOT / "MANIFEST.in").read_text(), re.M)
    packages = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    return {*grafts, *(p.rstrip("*") for p in packages)}


def test_the_sdist_carries_what_readme_links_to() -> None:
    links = re.findall(r"\]\(([^)#\s]+)", (ROOT / "README.md").read_text())
    local = [link for link in links if not re.match(r"^[a-z]+:", link)]
    assert local, "README.md links to no file"
    carried = _sdist_dirs()
    missing = [link for link in local if link.split("/")[0] not in carried]
    assert missing == []
    assert {"docs", "examples"} <= carried
