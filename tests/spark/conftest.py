"""Fixtures for the Spark connector tests: one SparkSession and one TCP cluster per session.

The cluster runs in this (the test) process: bookies over TCP, metadata in the
real ZooKeeper of the ``zk_server`` fixture, so Spark's Python workers (other
processes) reach it with ``embedlog.connect(metadataUri)``.

Without PySpark the fixture fails, it does not skip: CI installs the ``spark``
extra, and a silently skipped suite would hide the connector's bugs.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_TESTS = Path(__file__).resolve().parents[1]
_ROOT = _TESTS.parent
if str(_TESTS) not in sys.path:
    sys.path.insert(0, str(_TESTS))

from zkserver import zk_server  # noqa: E402

from embedlog import LocalCluster  # noqa: E402

__all__ = ["zk_server"]

INSTALL_HINT = (
    "PySpark 4 is not installed: run `pip install -e '.[spark]'` "
    "(or `bash scripts/setup-dev.sh`, which installs it); Java 17+ must be on PATH"
)


def _import_pyspark() -> Any:
    try:
        import pyarrow  # noqa: F401  (Python data sources exchange rows as Arrow batches)
        import pyspark
        from pyspark.sql import SparkSession
        from pyspark.sql.datasource import DataSource  # noqa: F401  (PySpark >= 4.0)
    except ImportError as exc:
        pytest.fail(f"{INSTALL_HINT} ({exc})", pytrace=False)
    if int(pyspark.__version__.split(".")[0]) < 4:
        pytest.fail(f"{INSTALL_HINT} (found pyspark {pyspark.__version__})", pytrace=False)
    java_home = os.environ.get("JAVA_HOME")
    if not shutil.which("java") and not (java_home and Path(java_home, "bin", "java").exists()):
        pytest.fail(
            "Spark needs Java 17+: apt-get install -y openjdk-17-jre-headless", pytrace=False
        )
    return SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    SparkSession = _import_pyspark()
    # The Python workers are this interpreter, and find spark_connector even when the
    # package is not installed.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = str(_ROOT) + (os.pathsep + path if path else "")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("embedlog-connector-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        # A short-lived test JVM on a small machine: C1 only and the serial collector
        # halve Spark's start-up time.
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    from spark_connector import register

    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_cluster(zk_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Three TCP bookies with ZooKeeper metadata, shared by the Spark tests."""
    uri = zk_server.uri(f"/spark-{uuid.uuid4().hex[:12]}")
    cluster = LocalCluster(
        3, data_dir=tmp_path_factory.mktemp("spark-cluster"), transport="tcp", metadata_uri=uri
    ).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def metadata_uri(spark_cluster: Any) -> str:
    return str(spark_cluster.metadata_uri)


@pytest.fixture
def client(spark_cluster: Any) -> Iterator[Any]:
    c = spark_cluster.client(f"test-{uuid.uuid4().hex[:6]}")
    try:
        yield c
    finally:
        c.close()
