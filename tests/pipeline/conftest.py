"""Spark for the pipeline's tests: one session per module, in local mode; a missing pyspark or Java runtime
fails in CI and skips elsewhere. The class-data archive (``jvmcache``) is off unless a test turns it on,
so that no test writes into the user's cache or prints its notice."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

os.environ["DCPCTL_JVM_CACHE"] = "off"  # inherited by every analyze a test starts


def spark_or_skip() -> None:
    try:
        import pyspark  # noqa: F401, PLC0415
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("pyspark is missing: the test extra installs it")
        pytest.skip("pyspark not installed (pip install -e '.[test]')")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        if os.environ.get("CI"):
            pytest.fail("no Java runtime: .ci/run installs one")
        pytest.skip("no Java runtime")


@pytest.fixture(scope="module")
def spark_module() -> Iterator[None]:
    spark_or_skip()
    yield
    from pyspark.sql import SparkSession  # noqa: PLC0415

    session = SparkSession.getActiveSession()
    if session is not None:
        session.stop()


@pytest.fixture
def spark(spark_module: None) -> Any:
    """The module's session (getOrCreate): started once, and again only after the analyze command, which
    stops the session it ran in, as it must under spark-submit."""
    from dcpctl.pipeline import job  # noqa: PLC0415

    return job.spark_session("local[2]", "dcpctl tests")


