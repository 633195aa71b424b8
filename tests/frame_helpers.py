"""DataFrame comparisons the tests share: ``pyspark.testing.assertDataFrameEqual``, the schema first, then the rows.

assertDataFrameEqual compares floats *and decimals* within a relative 1e-5 (pyspark 4.2.0): two source positions
(``array<decimal(38,0)>``) a unit apart past 100,000 -- two LSNs, two binlog offsets -- would pass as equal, so
``assert_same_frames`` compares them as their exact text, after comparing the schemas as they are."""

from __future__ import annotations

import re

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual, assertSchemaEqual

from cdcreplay.compaction import latest_rows

LIVE_STATE_DDL = "key string, after map<string, string>"
INEXACT = re.compile(r"\b(decimal|float|double)\b")


def _positions_as_text(frame: DataFrame) -> DataFrame:
    return frame.withColumn("position", F.col("position").cast("array<string>"))


def assert_same_frames(actual: DataFrame, expected: DataFrame) -> None:
    """Changelog, state or decoded rows: every column of every row, in any order; positions exactly."""
    inexact = [f.name for f in expected.schema if f.name != "position" and INEXACT.search(f.dataType.simpleString())]
    assert not inexact, f"assertDataFrameEqual would compare {inexact} only approximately"
    assertSchemaEqual(actual.schema, expected.schema)
    assertDataFrameEqual(_positions_as_text(actual), _positions_as_text(expected))


def assert_live_state(decoded: DataFrame, expected: dict[str, dict]) -> None:
    """The live rows a decoder's changelog rows compact to equal ``{key: after image}``."""
    changes = decoded.where(F.col("record_kind") == "changelog").drop("timestamp", "record_kind")
    live = latest_rows(changes).where(~F.col("deleted")).select("key", "after")
    assertDataFrameEqual(live, live.sparkSession.createDataFrame(list(expected.items()), LIVE_STATE_DDL))
