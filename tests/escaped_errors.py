"""Fail the test during which an error escaped instead of being handled, as a pytest plugin.

An exception that only ever reaches a log is a decision nobody made: a request whose
failure no caller saw, a straggler task whose outcome was dropped. This plugin makes
the suite fail on

* whatever an asyncio loop's exception handler reports: a task or future whose
  exception was never retrieved ("Task exception was never retrieved", "Future
  exception was never retrieved", logged when the last reference goes), an exception
  that escaped a callback ("Exception in callback ..."). The default handler logs them
  at ERROR on the ``asyncio`` logger, from whichever thread the loop runs in (a
  cluster's runs in a thread of its own, embedlog/runtime.py), so one handler on that
  logger sees every loop's reports;
* an unraisable exception (``sys.unraisablehook``: an exception in ``__del__``, in a
  finalizer, in a generator closed by the garbage collector) and an exception that
  ended a thread: pytest reports both as warnings, which this plugin makes errors.

The test that was running fails at teardown, after its fixtures' teardown (a module
or session fixture's counts as its last test's) and a garbage collection, so that a
task dropped in a reference cycle is reported by the test that dropped it. Anything
reported outside a test (at collection, between tests) fails the session.

Use it with ``pytest_plugins = ["escaped_errors"]`` in tests/conftest.py, or ``-p
escaped_errors`` with tests/ on sys.path.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Generator

import pytest


class EscapedErrors(logging.Handler):
    """Keeps what the ``asyncio`` logger says at ERROR: only the loops' exception handler
    logs there at that level."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def take(self) -> list[logging.LogRecord]:
        with self.lock:  # type: ignore[union-attr]  # a Handler's lock, made in __init__
            taken, self.records = self.records, []
        return taken


_handler = EscapedErrors()
_outside: list[logging.LogRecord] = []


def describe(records: list[logging.LogRecord]) -> str:
    formatter = logging.Formatter("%(message)s")
    return "\n\n".join(formatter.format(r) for r in records)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("filterwarnings", "error::pytest.PytestUnraisableExceptionWarning")
    config.addinivalue_line("filterwarnings", "error::pytest.PytestUnhandledThreadExceptionWarning")
    logging.getLogger("asyncio").addHandler(_handler)


def pytest_unconfigure(config: pytest.Config) -> None:
    logging.getLogger("asyncio").removeHandler(_handler)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    _outside.extend(_handler.take())  # reported since the last test's teardown
    return (yield)


# tryfirst: the outermost wrapper, so this runs after pytest's logging plugin let go of
# the test's log records, whose arguments may hold the last reference to a failed future
# (through the exception's traceback frames).
@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    # After every fixture's teardown (clusters stopped, loops closed): what the test left.
    result = yield
    gc.collect()
    records = _handler.take()
    if records:
        raise pytest.fail.Exception(
            f"{len(records)} exception(s) escaped to an asyncio loop's exception handler "
            f"instead of being handled where they were decided:\n\n{describe(records)}",
            pytrace=False,
        )
    return result


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    gc.collect()
    _outside.extend(_handler.take())
    if _outside:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            title = "exceptions the asyncio loops reported outside any test"
            reporter.write_sep("=", title, red=True)
            reporter.write_line(describe(_outside))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
