"""The pytest plugin, used from a project of its own (pytester), as a user's would be.

Each test runs pytest in a subprocess in a fresh directory with no conftest: the plugin
must come from embedlog's ``pytest11`` entry point alone.
"""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", *args)


def test_the_plugin_is_registered_as_a_pytest11_entry_point():
    found = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert found.get("embedlog") == "embedlog.testing.pytest_plugin", (
        "embedlog's pytest11 entry point is missing: reinstall the package (pip install -e .)"
    )


def test_the_marker_shapes_the_cluster(pytester):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.embedlog(bookies=5, journal_write_data=False, flush_interval=0.05)
        def test_shape(embedlog_cluster, embedlog_client):
            assert len(embedlog_cluster.running_bookies()) == 5
            cfg = embedlog_cluster.bookie(embedlog_cluster.bookie_ids[0]).config
            assert cfg.journal_write_data is False
            assert cfg.flush_interval == 0.05
            wh = embedlog_client.create_ledger(5, 3, 2)
            assert wh.add(b"x") == 0

        def test_default_shape(embedlog_cluster):
            assert len(embedlog_cluster.running_bookies()) == 3
            assert embedlog_cluster.bookie(embedlog_cluster.bookie_ids[0]).config.journal_write_data
        """
    )
    run(pytester).assert_outcomes(passed=2)


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ("(5)", "takes keywords only"),
        ("(bookies=0)", "must be a whole number >= 1, got 0"),
        ("(bookies='3')", "must be a whole number >= 1, got '3'"),
        ("(data_dir='/tmp/x')", "data_dir is the fixture's"),
        ("(bookie=4)", "unknown setting 'bookie' (did you mean 'bookies'?); known: *, bookies, *"),
    ],
)
def test_a_bad_marker_fails_the_test_with_one_line(pytester, marker, message):
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.embedlog{marker}
        def test_it(embedlog_cluster):
            pass
        """
    )
    result = run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*{message}*"])
    assert "Traceback" not in result.stdout.str()


def test_a_marker_typo_names_the_settings_an_application_has(pytester):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.embedlog(bookies=3, journal_write_dat=False)
        def test_it(embedlog_cluster):
            pass
        """
    )
    result = run(pytester)
    result.assert_outcomes(errors=1)
    said = [line for line in result.outlines if "unknown setting" in line]
    assert said[0].startswith(
        "@pytest.mark.embedlog: unknown setting 'journal_write_dat' (did you mean "
        "'journal_write_data'?); known: auto_fix_cookies, bookies, "
    )
    assert "transport" in said[0] and "unsafe" not in result.stdout.str()
    assert "During handling" not in result.stdout.str()


def test_clusters_stop_when_the_test_fails(pytester):
    # The first test fails with a bookie crashed and a link blocked; the second starts a
    # cluster on the same directories: the bookies' directory locks refuse that unless every
    # bookie of the first cluster was stopped and released its files.
    pytester.makepyfile(
        """
        from embedlog import LocalCluster

        seen = {}

        def test_fails(embedlog_cluster_factory):
            cluster = embedlog_cluster_factory(3)
            seen["dir"] = cluster.data_dir
            seen["cluster"] = cluster
            cluster.crash_bookie(cluster.bookie_ids[0])
            cluster.network.block("app", cluster.bookie_ids[1])
            assert False, "the test fails"

        def test_after(tmp_path):
            assert seen["cluster"].running_bookies() == []
            with LocalCluster(3, seen["dir"]) as again:
                assert len(again.running_bookies()) == 3
        """
    )
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*the test fails*"])


def test_the_factory_makes_independent_clusters(pytester):
    pytester.makepyfile(
        """
        def test_two(embedlog_cluster_factory):
            a = embedlog_cluster_factory(3)
            b = embedlog_cluster_factory(1, journal_write_data=False)
            assert a.data_dir != b.data_dir
            assert len(b.running_bookies()) == 1
            la = a.client("x").create_ledger(3, 3, 2)
            lb = b.client("x").create_ledger(1, 1, 1)
            la.add(b"a")
            lb.add(b"b")
            assert list(b.client("y").list_ledgers()) == [lb.ledger_id]
        """
    )
    run(pytester).assert_outcomes(passed=1)


def test_zookeeper_fixture_runs_a_real_server(pytester):
    pytester.makepyfile(
        """
        from embedlog.metadata.zkserver import four_letter

        def test_zk(embedlog_zookeeper, embedlog_cluster_factory):
            assert four_letter(embedlog_zookeeper.port) == b"imok"
            first, second = embedlog_zookeeper.fresh_uri(), embedlog_zookeeper.fresh_uri()
            assert first != second and first.startswith("zk://127.0.0.1:")
            cluster = embedlog_cluster_factory(3, metadata_uri=first)
            wh = cluster.client("app").create_ledger(3, 3, 2)
            assert wh.add(b"in zookeeper") == 0
            wh.close()
        """
    )
    run(pytester).assert_outcomes(passed=1)


def test_zookeeper_fixture_names_the_install_command_when_missing(pytester, tmp_path, monkeypatch):
    empty = tmp_path / "no-zookeeper-here"
    empty.mkdir()
    monkeypatch.setenv("ZOOKEEPER_HOME", str(empty))  # the subprocess inherits it
    monkeypatch.delenv("ZOOKEEPER_CLASSPATH", raising=False)
    pytester.makepyfile(
        """
        def test_zk(embedlog_zookeeper):
            pass
        """
    )
    result = run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*ZooKeeper is not installed*apt-get install -y zookeeper*"])
