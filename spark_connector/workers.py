"""Which Python Spark's workers run, and whether it imports this very connector.

Spark starts its Python workers (planning, commits, tasks) with ``spark.pyspark.python``,
else the ``PYSPARK_PYTHON`` environment variable, else ``python3`` found on the PATH:
not necessarily the interpreter that imported the connector. In a virtualenv that is not
activated that interpreter lacks ``spark_connector`` (the first query fails with
ModuleNotFoundError); with another ``python3`` first on the PATH it may import another
copy of embedlog, silently. ``register`` checks first.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from attrs import frozen

_PROBE = (
    "import json, embedlog, spark_connector; "
    "print(json.dumps([embedlog.__file__, spark_connector.__file__]))"
)


class WorkerPythonError(RuntimeError):
    """Spark's workers would run a Python that cannot import this connector."""


@frozen
class WorkerPython:
    executable: str  # as Spark will run it (a name looked up on the PATH, or a path)
    setting: str  # where it comes from: the setting to change


def worker_pythons(
    python_exec: str, env: Mapping[str, str], conf_value: str | None
) -> list[WorkerPython]:
    """The interpreters Spark may start for this connector.

    Tasks run the session's ``pythonExec``: ``PYSPARK_PYTHON`` as it was when the session
    started, else ``python3`` on the PATH. ``spark.pyspark.python``, when set, is what
    Spark's own launcher and JVM-side planners may use: it must import the same.
    """
    setting = (
        "PYSPARK_PYTHON"
        if env.get("PYSPARK_PYTHON")
        else "python3 on the PATH: PYSPARK_PYTHON was not set when the session started"
    )
    out = [WorkerPython(python_exec, setting)]
    if conf_value and conf_value != python_exec:
        out.append(WorkerPython(conf_value, "spark.pyspark.python"))
    return out


def _ours() -> list[str]:
    import embedlog

    # This package's __init__.py is this module's neighbour: importing the package here
    # would be an import cycle (it imports this module).
    package = Path(__file__).resolve().with_name("__init__.py")
    return [str(Path(embedlog.__file__ or "").resolve()), str(package)]


def probe(python: str, pythonpath: str | None) -> list[str] | str:
    """The files embedlog and spark_connector load from in ``python``, or why it failed."""
    exe = python if os.sep in python else shutil.which(python)
    if exe is None:
        return f"{python!r} is not on the PATH"
    env = dict(os.environ)
    import pyspark

    # Spark puts its own pyspark and py4j (zips it ships) on the workers' path, before
    # the application's: not the driver's site-packages.
    home = Path(pyspark.__file__).resolve().parent
    paths = [str(z) for z in sorted((home / "python" / "lib").glob("*.zip"))] or [str(home.parent)]
    if pythonpath:
        paths.append(pythonpath)
    env["PYTHONPATH"] = os.pathsep.join(paths)
    try:
        done = subprocess.run(
            [exe, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120
        )
    except OSError as exc:
        return f"{exe} cannot be run: {exc}"
    except subprocess.TimeoutExpired:
        return f"{exe} did not finish importing the connector in 120 s"
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return lines[-1] if lines else f"exit status {done.returncode}"
    try:
        return [str(Path(p).resolve()) for p in json.loads(done.stdout.strip().splitlines()[-1])]
    except (ValueError, IndexError, TypeError):
        return f"unexpected output {done.stdout[-200:]!r}"


def explain(choice: WorkerPython, found: list[str] | str, ours: list[str]) -> str | None:
    """The error to raise, or None when the workers import this connector."""
    if found == ours:
        return None
    fix = (
        f"Set spark.pyspark.python (SparkSession.builder.config('spark.pyspark.python', "
        f"{sys.executable!r})) or export PYSPARK_PYTHON={sys.executable} before the "
        "session starts, to an interpreter that has embedlog[spark] installed "
        "(docs/spark.md, 'Which Python the workers run')."
    )
    if isinstance(found, str):
        return (
            f"Spark's Python workers would run {choice.executable!r} (from {choice.setting}), "
            f"which cannot import the embedlog connector: {found}. {fix}"
        )
    return (
        f"Spark's Python workers would run {choice.executable!r} (from {choice.setting}), "
        f"which imports another copy of embedlog/spark_connector ({found[0]}, {found[1]}) than "
        f"this application ({ours[0]}, {ours[1]}). {fix}"
    )


def check_workers(spark: object) -> list[WorkerPython]:
    """Raise WorkerPythonError unless Spark's workers will import this connector."""
    sc = spark.sparkContext  # type: ignore[attr-defined]
    choices = worker_pythons(
        str(sc.pythonExec), os.environ, sc.getConf().get("spark.pyspark.python")
    )
    ours = _ours()
    for choice in choices:
        found = probe(choice.executable, os.environ.get("PYTHONPATH"))
        problem = explain(choice, found, ours)
        if problem is not None:
            raise WorkerPythonError(problem)
    return choices
