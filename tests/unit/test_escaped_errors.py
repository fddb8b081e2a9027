"""The suite's check for errors that escape instead of being handled (tests/escaped_errors.py),
run on tests made to leave each kind behind."""

from __future__ import annotations

import os
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

LEAVERS = """
import asyncio
import threading

from embedlog.runtime import Runtime


async def boom():
    raise ValueError("nobody looked at me")


def test_a_task_whose_exception_nobody_retrieved():
    async def main():
        asyncio.get_running_loop().create_task(boom())
        await asyncio.sleep(0.01)

    asyncio.run(main())


def test_a_future_whose_exception_nobody_retrieved():
    async def main():
        asyncio.get_running_loop().create_future().set_exception(ValueError("dropped"))

    asyncio.run(main())


def test_a_callback_that_raised():
    async def main():
        asyncio.get_running_loop().call_soon(lambda: 1 / 0)
        await asyncio.sleep(0.01)

    asyncio.run(main())


def test_a_task_dropped_on_a_background_loop():
    runtime = Runtime("leaver")
    try:
        async def start():
            asyncio.get_running_loop().create_task(boom())

        runtime.run(start())
        runtime.run(asyncio.sleep(0.01))
    finally:
        runtime.close()


def test_an_unraisable_exception():
    class Finalizer:
        def __del__(self):
            raise ValueError("raised in __del__")

    Finalizer()


def test_a_thread_that_died_of_an_exception():
    t = threading.Thread(target=lambda: 1 / 0)
    t.start()
    t.join()


def test_what_was_retrieved_passes():
    async def main():
        task = asyncio.get_running_loop().create_task(boom())
        await asyncio.sleep(0.01)
        assert isinstance(task.exception(), ValueError)
        fut = asyncio.get_running_loop().create_future()
        fut.set_exception(ValueError("looked at"))
        assert fut.exception() is not None

    asyncio.run(main())
"""


OUTSIDE = """
import asyncio


async def boom():
    raise ValueError("dropped while the module was imported")


# At collection, before any test runs (a module fixture's teardown would count as the
# teardown of the module's last test).
_loop = asyncio.new_event_loop()
_loop.create_task(boom())
_loop.run_until_complete(asyncio.sleep(0.01))
_loop.close()
del _loop


def test_passes():
    pass
"""


def _run(pytester, monkeypatch, **files):
    tests_dir = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", tests_dir)
    pytester.makepyfile(**files)
    return pytester.runpytest_subprocess("-p", "escaped_errors", "-p", "no:cacheprovider", "-rA")


def test_each_kind_of_escaped_error_fails_the_test_that_left_it(pytester, monkeypatch):
    result = _run(pytester, monkeypatch, test_leavers=LEAVERS)
    # Reported by the loop's exception handler: the test errors at teardown.
    result.stdout.fnmatch_lines_random(
        [
            "ERROR test_leavers.py::test_a_task_whose_exception_nobody_retrieved*",
            "ERROR test_leavers.py::test_a_future_whose_exception_nobody_retrieved*",
            "ERROR test_leavers.py::test_a_callback_that_raised*",
            "ERROR test_leavers.py::test_a_task_dropped_on_a_background_loop*",
            "FAILED test_leavers.py::test_an_unraisable_exception*",
            "FAILED test_leavers.py::test_a_thread_that_died_of_an_exception*",
            "E * pytest.PytestUnraisableExceptionWarning: *",
            "E * pytest.PytestUnhandledThreadExceptionWarning: *",
            "PASSED test_leavers.py::test_what_was_retrieved_passes",
            "*Task exception was never retrieved*",
            "*Future exception was never retrieved*",
            "*Exception in callback*",
        ]
    )
    result.stdout.no_fnmatch_line("ERROR test_leavers.py::test_what_was_retrieved_passes*")
    result.assert_outcomes(passed=5, failed=2, errors=4)


def test_an_escaped_error_outside_any_test_fails_the_session(pytester, monkeypatch):
    result = _run(pytester, monkeypatch, test_outside=OUTSIDE)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*exceptions the asyncio loops reported outside any test*"])
    assert result.ret == 1
