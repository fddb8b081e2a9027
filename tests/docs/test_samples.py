"""Every code sample of README.md and docs/**/*.md runs, as a reader would run it.

One test a page: its Python blocks run in order in a fresh directory of their own
(relative paths in a sample land there), each in a namespace of its own unless it
``continues`` the previous one; blocks that define ``test_*`` functions run under pytest
in a project of their own (the plugin comes from the entry point, as for a user); shell
blocks marked ``run`` run with bash. Every ``embedlog`` command written in a shell block,
run or not, must name subcommands and options the command line has. tests/docs/samples.py
says how a page marks its blocks.
"""

from __future__ import annotations

import argparse
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# tests/docs/ is on sys.path (pytest puts a test directory without __init__.py there).
from samples import (
    SANDBOX_URI,
    Sample,
    SampleError,
    inline_commands,
    members_named,
    pages,
    samples_of,
    shell_commands,
)

from embedlog import Client, LocalCluster
from embedlog.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = [p.relative_to(ROOT).as_posix() for p in pages(ROOT)]


def page_samples(page: str) -> list[Sample]:
    return samples_of((ROOT / page).read_text(), page)


def runnable(page: str) -> list[Sample]:
    return [
        s
        for s in page_samples(page)
        if s.skip is None
        and "reference" not in s.words
        and (s.is_python or (s.is_shell and "run" in s.words))
    ]


PAGES_THAT_RUN = [page for page in PAGES if runnable(page)]


# -- the command lines ---------------------------------------------------------------------


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def command_problems(argv: list[str]) -> list[str]:
    """What in ``embedlog ARGV`` the command line does not have: a subcommand it lacks,
    an option its (sub)command does not take. Placeholders (ID, DIR, ...) pass."""
    parser = build_parser()
    path = ["embedlog"]
    problems: list[str] = []
    options = set(parser._option_string_actions)
    for word in argv:
        if word.startswith("-"):
            continue
        choices = _subcommands(parser)
        if not choices:
            break
        if word == "...":  # "embedlog bookie ...": any of its subcommands
            return problems
        names = word.split("|")  # a synopsis: "ledger list|show"
        missing = [n for n in names if n not in choices]
        if missing:
            problems.append(f"{' '.join(path)} has no subcommand {'|'.join(missing)}")
            return problems
        parser = choices[names[0]]
        path.append(word)
        options |= set(parser._option_string_actions)
    for word in argv:
        for option in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", word):
            if word.startswith(("-", "[")) and option not in options:
                problems.append(f"{' '.join(path)} takes no option {option}")
    return problems


@pytest.mark.parametrize(
    ("argv", "problems"),
    [
        (["ledger", "list", "--json"], []),
        (["ledger", "list|show"], []),
        (["bookie", "run", "--data-dir", "D", "[--config", "FILE]"], []),
        (["ledgr", "list"], ["embedlog has no subcommand ledgr"]),
        (["ledger", "list", "--jsn"], ["embedlog ledger list takes no option --jsn"]),
        (
            ["auditor", "check", "--interval", "5"],
            ["embedlog auditor check takes no option --interval"],
        ),
        (["simpletest", "--entries", "10"], []),
        (["bookie", "...", "--anything"], []),
    ],
)
def test_command_problems(argv, problems):
    assert command_problems(argv) == problems


@pytest.mark.parametrize("page", PAGES)
def test_every_embedlog_command_on_the_page_exists(page):
    problems = [
        f"{sample.where}: {problem}"
        for sample in page_samples(page)
        if sample.is_shell
        for argv in shell_commands(sample.code)
        for problem in command_problems(argv)
    ]
    problems += [
        f"{page}: `embedlog {' '.join(argv)}`: {problem}"
        for argv in inline_commands((ROOT / page).read_text())
        for problem in command_problems(argv)
    ]
    assert not problems, "\n".join(problems)


# -- running the samples -------------------------------------------------------------------


# Guards against a hang, not a measure: a cold JVM and three bookies on a loaded machine.
READY_WAIT = 180.0
STOP_WAIT = 120.0
_URI_LINE = re.compile(r"^metadata URI: (zk://\S+)$")


def _shell_env() -> dict[str, str]:
    env = dict(os.environ)
    # `embedlog` is this interpreter's, even when the scripts dir is not on PATH.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


class Background:
    """A ``background`` block's server: started with bash, left running for the page's
    later blocks, then stopped with SIGINT as a reader's Ctrl-C stops it."""

    def __init__(self, sample: Sample, workdir: Path) -> None:
        self.sample = sample
        self.output: list[str] = []
        self.uri: str | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.proc = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", sample.code],
            cwd=workdir,
            env=_shell_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own group: the SIGINT below reaches it alone
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _next_line(self, wait: float) -> str | None:
        try:
            line = self._lines.get(timeout=wait)
        except queue.Empty:
            raise AssertionError(
                f"{self.sample.where}: said nothing for {wait:g}s:\n" + "\n".join(self.output)
            ) from None
        if line is not None:
            self.output.append(line)
        return line

    def wait_ready(self) -> None:
        while (line := self._next_line(READY_WAIT)) is not None:
            if match := _URI_LINE.match(line):
                self.uri = match.group(1)
            if "Ctrl-C to stop" in line:
                return
        raise AssertionError(
            f"{self.sample.where} exited {self.proc.wait()} before it was ready:\n"
            + "\n".join(self.output)
        )

    def stop(self) -> int:
        """SIGINT, then the exit status (killed, and -9, if it does not stop)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
        try:
            status = self.proc.wait(timeout=STOP_WAIT)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            status = self.proc.wait()
        self._reader.join()
        while self._lines.qsize():
            if (line := self._lines.get()) is not None:
                self.output.append(line)
        return status


class PageRun:
    """One page's samples, run in order in one directory."""

    def __init__(self, request: pytest.FixtureRequest, workdir: Path) -> None:
        self.request = request
        self.workdir = workdir
        self.namespace: dict[str, Any] | None = None
        self.started: list[LocalCluster] = []
        self.clients: list[Client] = []
        self.servers: list[Background] = []

    def code(self, sample: Sample) -> str:
        """The block as a reader runs it: with the URI a server of the page printed."""
        uris = [s.uri for s in self.servers if s.uri is not None]
        if SANDBOX_URI in sample.code:
            assert uris, f"{sample.where}: names {SANDBOX_URI} but no server printed a URI"
            return sample.code.replace(SANDBOX_URI, uris[-1])
        return sample.code

    def python(self, sample: Sample) -> None:
        if sample.test_functions:
            self.pytest_file(sample)
            return
        if "continues" in sample.words:
            assert self.namespace is not None, f"{sample.where}: nothing to continue"
            namespace = self.namespace
        else:
            namespace = {"__name__": "__main__"}
        if "cluster" in sample.words:
            cluster = LocalCluster(3, data_dir=self.workdir / "cluster").start()
            self.started.append(cluster)
            namespace.update(cluster=cluster, client=cluster.client("app"))
        if "zookeeper" in sample.words:
            namespace["uri"] = self.request.getfixturevalue("embedlog_zookeeper").fresh_uri()
        # Padding keeps the page's line numbers in tracebacks: "docs/x.md", line 42.
        source = "\n" * sample.line + self.code(sample)
        exec(compile(source, str(ROOT / sample.page), "exec"), namespace)
        self.namespace = namespace

    def pytest_file(self, sample: Sample) -> None:
        pytester: pytest.Pytester = self.request.getfixturevalue("pytester")
        pytester.makepyfile(**{f"test_sample_{sample.line}": sample.code})
        result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
        assert result.ret == 0, f"{sample.where}:\n" + "\n".join(result.outlines[-30:])
        result.assert_outcomes(passed=len(sample.test_functions))

    def shell(self, sample: Sample) -> None:
        if "background" in sample.words:
            server = Background(sample, self.workdir)
            self.servers.append(server)
            server.wait_ready()
            return
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", self.code(sample)],
            cwd=self.workdir,
            env=_shell_env(),
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, (
            f"{sample.where} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        )

    def leftovers(self) -> Iterator[LocalCluster | Client]:
        """Clusters and clients a sample left open in its namespace."""
        yield from self.started
        for value in (self.namespace or {}).values():
            if isinstance(value, LocalCluster | Client):
                yield value

    def close(self) -> list[str]:
        """Stop what the page left running; what went wrong stopping its servers."""
        for thing in reversed(list(self.leftovers())):
            if isinstance(thing, LocalCluster):
                thing.stop()
            else:
                thing.close()
        problems = []
        for server in reversed(self.servers):
            status = server.stop()
            if status != 0:
                said = "\n".join(server.output)
                problems.append(f"{server.sample.where}: exited {status} on Ctrl-C:\n{said}")
        return problems


@pytest.mark.parametrize("page", PAGES_THAT_RUN)
def test_the_page_s_samples_run(page, request, tmp_path, monkeypatch):
    workdir = tmp_path / "page"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    run = PageRun(request, workdir)
    try:
        for sample in runnable(page):
            if sample.is_python:
                run.python(sample)
            else:
                run.shell(sample)
    except BaseException:
        run.close()
        raise
    problems = run.close()
    assert not problems, "\n".join(problems)


def test_the_reference_names_only_members_that_exist(tmp_path):
    named = {
        (sample.where, obj, member)
        for page in PAGES
        for sample in page_samples(page)
        if "reference" in sample.words
        for obj, member in members_named(sample.code)
    }
    assert len(named) > 40, "docs/api.md lost its signature blocks"
    with LocalCluster(3, data_dir=tmp_path) as cluster:
        client = cluster.client("reference")
        wh = client.create_ledger(3, 3, 2)
        wh.add(b"x")
        ul = client.create_unbounded(3, 3, 2)
        objects = {
            "cluster": cluster,
            "cluster.network": cluster.network,
            "client": client,
            "wh": wh,
            "rh": client.open_ledger(wh.ledger_id, recover=False),
            "ul": ul,
        }
        missing = [
            f"{where}: {obj}.{member}"
            for where, obj, member in sorted(named)
            if not hasattr(objects[obj], member)
        ]
        ul.close()
    assert not missing, "\n".join(missing)


def test_few_samples_are_skipped_and_each_says_why():
    skipped = [s for page in PAGES for s in page_samples(page) if s.skip is not None]
    assert all(s.skip for s in skipped)
    python = [s for page in PAGES for s in page_samples(page) if s.is_python]
    assert len(skipped) * 5 <= len(python), [f"{s.where}: {s.skip}" for s in skipped]


# -- the parser of pages -------------------------------------------------------------------


PAGE = """\
text
<!-- sample: cluster; continues -->

```python
x = 1
```

```bash
embedlog ledger list \\
    --json  # a comment
host A: embedlog bookie run --listen 0.0.0.0:3181
pip install embedlog && python -m embedlog --version
```
<!-- sample: skip: needs Spark; and Java -->
```python
spark
```
"""


def test_samples_of_a_page():
    found = samples_of(PAGE, "p.md")
    assert [(s.line, s.lang, s.words, s.skip) for s in found] == [
        (4, "python", frozenset({"cluster", "continues"}), None),
        (8, "bash", frozenset(), None),
        (15, "python", frozenset(), "needs Spark; and Java"),
    ]
    assert found[0].code == "x = 1\n"
    assert members_named("cluster.network.heal()  # and cluster.stop(), wh.add(x), not a.wh.b") == {
        ("cluster.network", "heal"),
        ("cluster", "stop"),
        ("wh", "add"),
    }
    assert shell_commands(found[1].code) == [
        ["ledger", "list", "--json"],
        ["bookie", "run", "--listen", "0.0.0.0:3181"],
        ["--version"],
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<!-- sample: skip -->\n```python\nx\n```\n", "'skip' needs a reason"),
        ("<!-- sample: clusters -->\n```python\nx\n```\n", "unknown sample directive"),
        ("```python\nx\n", "never closed"),
        ("<!-- sample: background -->\n```bash\nx\n```\n", "'background' is for shell"),
    ],
)
def test_malformed_samples_are_errors(text, message):
    with pytest.raises(SampleError, match=message):
        samples_of(text, "p.md")


def test_inline_commands():
    text = (
        "Run `embedlog ledger list --json` or `python -m embedlog --version`; "
        "`embedlog bookie run: error: port in use` is a message, `ls` no command.\n"
        "```\nembedlog in a fence\n```\n"
    )
    assert inline_commands(text) == [["ledger", "list", "--json"], ["--version"]]


def test_a_pytest_block_is_recognised_by_its_test_functions():
    (block,) = samples_of("```python\nimport pytest\n\ndef test_a(x):\n    pass\n```\n", "p.md")
    assert block.test_functions == ["test_a"]
