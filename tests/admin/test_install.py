"""A base install without extras, the LevelDB binding shim, the version: each in a fresh
interpreter where the missing module is really missing (a sys.meta_path blocker)."""

from __future__ import annotations

import subprocess
import sys

from cli_helpers import embedlog_env

BLOCKER = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Block())
"""


def python_without(blocked: set[str], code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCKER.format(blocked=blocked) + code],
        capture_output=True,
        text=True,
        env=embedlog_env(),
        timeout=300,
    )


def cli_without(blocked: set[str], *argv: str) -> subprocess.CompletedProcess[str]:
    code = f"import sys; from embedlog.cli import main; sys.exit(main({list(argv)!r}))"
    return python_without(blocked, code)


def test_sandbox_without_kazoo_names_the_extra(tmp_path) -> None:
    out = cli_without({"kazoo"}, "sandbox", "--data-dir", str(tmp_path / "d"))
    assert out.returncode == 2, out
    assert "pip install 'embedlog[zk]'" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "d").exists()  # nothing started, nothing made


def test_zookeeper_metadata_without_kazoo_names_the_extra() -> None:
    out = cli_without({"kazoo"}, "ledger", "list", "--metadata-uri", "zk://127.0.0.1:9/x")
    assert out.returncode == 2 and "pip install 'embedlog[zk]'" in out.stderr
    code = (
        "import embedlog\n"
        "try:\n    embedlog.connect('zk://127.0.0.1:9/x')\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    out = python_without({"kazoo"}, code)
    assert "pip install 'embedlog[zk]'" in out.stdout, out.stderr


def test_the_embedded_cluster_needs_no_extra(tmp_path) -> None:
    code = (
        "from embedlog import LocalCluster\n"
        f"with LocalCluster(3, {str(tmp_path / 'c')!r}) as c:\n"
        "    wh = c.client().create_ledger(3, 3, 2)\n"
        "    print(wh.add(b'x'))\n"
    )
    out = python_without({"kazoo", "pyspark"}, code)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "0\n"


def test_leveldb_takes_whichever_binding_is_there() -> None:
    # plyvel_next hidden: plyvel (and the reverse where only plyvel_next is installed).
    code = "from embedlog import leveldb; print(leveldb.BINDING_NAME)"
    installed = [
        name
        for name in ("plyvel_next", "plyvel")
        if python_without(set(), f"import {name}").returncode == 0
    ]
    assert installed, "no LevelDB binding installed"
    for name in installed:
        others = {"plyvel_next", "plyvel"} - {name}
        out = python_without(others, code)
        assert out.stdout.strip() == name, out.stderr


def test_no_leveldb_binding_says_what_to_install() -> None:
    out = python_without({"plyvel_next", "plyvel"}, "import embedlog.leveldb")
    assert out.returncode == 1
    last = out.stderr.strip().splitlines()[-1]
    assert "LevelDBBindingMissing" in last and "pip install plyvel-next" in last


def test_one_version_source() -> None:
    from importlib.metadata import PackageNotFoundError, version

    import embedlog

    out = subprocess.run(
        [sys.executable, "-m", "embedlog", "--version"],
        capture_output=True,
        text=True,
        env=embedlog_env(),
        timeout=60,
    )
    assert out.stdout == f"embedlog {embedlog.__version__}\n"
    try:
        assert version("embedlog") == embedlog.__version__  # the installed metadata agrees
    except PackageNotFoundError:
        pass  # running from a checkout that is not installed


def test_dir_lists_the_lazily_exported_names_before_their_first_use() -> None:
    code = (
        "import sys, embedlog\n"
        "names = dir(embedlog)\n"
        "print(sorted(set(embedlog.__all__) - set(names)))\n"
        "print('embedlog.cluster' in sys.modules, 'LocalCluster' in names)\n"
    )
    out = python_without(set(), code)
    assert out.stdout.splitlines() == ["[]", "False True"], out.stderr
