"""Bad numbers, paths and URIs on the command line: one line naming the problem and the
fix, exit 2, nothing on stdout. Help text is plain text. Every command runs for real."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from cli_helpers import run

from embedlog import LocalCluster
from embedlog.cli import build_parser


def one_line_error(*argv: str) -> str:
    out = run(*argv)
    assert out.returncode == 2, out
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--entries", "-5"], "--entries -5: give 1 or more entries"),
        (["--entries", "0"], "--entries 0: give 1 or more entries"),
        (["--size", "-1"], "--size -1: give a size in bytes, 0 or more"),
        (["--bookies", "0"], "--bookies 0: give 1 or more bookies"),
        (["--bookies", "2"], "--ensemble 3: give 1 to --bookies (2)"),
        (["--write-quorum", "4"], "--write-quorum 4: give 1 to --ensemble (3)"),
        (["--ack-quorum", "0"], "--ack-quorum 0: give 1 to --write-quorum (3)"),
    ],
)
def test_simpletest_refuses_numbers_that_make_no_test(argv, line) -> None:
    assert one_line_error("simpletest", *argv) == f"embedlog simpletest: error: {line}"


def test_sandbox_with_no_bookies_is_an_error(tmp_path: Path) -> None:
    line = one_line_error("sandbox", "--bookies", "0", "--data-dir", str(tmp_path / "d"))
    assert line == "embedlog sandbox: error: --bookies 0: give 1 or more bookies"
    assert not (tmp_path / "d").exists()


def test_sandbox_with_a_missing_certificate_starts_nothing(tmp_path: Path) -> None:
    line = one_line_error(
        "sandbox", "--tls-cert", str(tmp_path / "nope.pem"), "--tls-key",
        str(tmp_path / "nope.key"), "--data-dir", str(tmp_path / "d"),
    )  # fmt: skip
    assert line.startswith(f"embedlog sandbox: error: tls_cert {tmp_path / 'nope.pem'} does not")
    assert not list((tmp_path / "d").glob("zookeeper/data-*"))  # ZooKeeper never ran


@pytest.fixture(scope="module")
def five_entries(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data_dir = tmp_path_factory.mktemp("cli-errors") / "cluster"
    with LocalCluster(3, data_dir) as cluster:
        wh = cluster.client().create_ledger(3, 3, 2)
        for i in range(5):
            wh.add(b"entry %d" % i)
        wh.close()
    return data_dir


@pytest.mark.parametrize(
    ("range_", "line"),
    [
        (["--first", "5", "--last", "2"], "--first 5 is after --last 2: give --first <= --last"),
        (["--first", "-1"], "--first -1: give an entry id, 0 or more"),
        (["--first", "7"], "ledger 0: --first 7 is past its last entry 4"),
        (["--last", "9"], "ledger 0: --last 9 is past its last entry 4"),
    ],
)
def test_ledger_read_refuses_a_range_it_cannot_print(five_entries, range_, line) -> None:
    got = one_line_error("ledger", "read", "0", *range_, "--data-dir", str(five_entries))
    assert got == f"embedlog ledger read: error: {line}"


def test_a_missing_password_file_is_named(five_entries, tmp_path: Path) -> None:
    nope = tmp_path / "nope"
    line = one_line_error(
        "ledger", "read", "0", "--password-file", str(nope), "--data-dir", str(five_entries)
    )
    assert line == (
        f"embedlog ledger read: error: --password-file {nope}: no such file or directory; "
        "give the file that holds the ledger's password, or set $EMBEDLOG_LEDGER_PASSWORD "
        "instead"
    )


@pytest.mark.parametrize(
    ("uri", "problem"),
    [
        ("memory://", "'memory://' is not a ZooKeeper URI"),
        ("/tmp/metadata", "'/tmp/metadata' is not a ZooKeeper URI"),
        ("zk://localhost/x", "'zk://localhost/x': 'localhost' is not host:port;"),
    ],
)
@pytest.mark.parametrize("command", [["ledger", "list"], ["bookie", "list"], ["sandbox"]])
def test_a_metadata_uri_error_names_the_zookeeper_form_only(command, uri, problem) -> None:
    line = one_line_error(*command, "--metadata-uri", uri)
    assert line.startswith(f"embedlog {' '.join(command)}: error: --metadata-uri {problem}")
    assert line.endswith("give the cluster's ZooKeeper, zk://host:port[,host:port...]/path")
    assert "None" not in line and "accepted forms" not in line


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _parsers(sub)
    return found


def test_help_is_plain_text_and_every_simpletest_option_says_what_it_is() -> None:
    top = run("--help")
    assert top.returncode == 0 and "simpletest" in top.stdout
    assert "``" not in top.stdout
    for parser in _parsers(build_parser()):
        assert "``" not in parser.format_help(), parser.prog
    (simpletest,) = [p for p in _parsers(build_parser()) if p.prog == "embedlog simpletest"]
    bare = [a.dest for a in simpletest._actions if not a.help]
    assert bare == []
