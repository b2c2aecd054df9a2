"""One local Spark session for the whole pipeline test run (JVM start-up is seconds)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark", reason="the pipeline extra is not installed")
    from zabd.pipeline.cli import spark_unavailable

    why = spark_unavailable()
    if why is not None:
        pytest.skip(why)
    from zabd.pipeline.session import get_session

    session = get_session("local[2]", app_name="zabd-tests")
    session.conf.set("spark.sql.shuffle.partitions", "2")
    yield session
    session.stop()
