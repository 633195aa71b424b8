"""Canal sends a primary-key change as ONE UPDATE whose `old` holds the previous key: the old key must be deleted."""

from __future__ import annotations

import json

from archive_helpers import Record, pipeline_config, write_parquet
from pyspark.testing import assertDataFrameEqual

from cdcreplay.entrypoints import EXIT_OK, replay_main
from cdcreplay.warehouse import read_table


def canal(offset: int, kind: str, data: list[dict], old: list[dict] | None = None, pk=("id",)) -> Record:
    message = {
        "data": data,
        "old": old,
        "database": "shop",
        "table": "t",
        "type": kind,
        "isDdl": False,
        "pkNames": list(pk) if pk else None,
        "mysqlType": {"id": "int", "v": "varchar(8)"},
        "es": 1000 + offset,
        "id": offset,
    }
    return Record("c", 0, offset, json.dumps(message))


def test_an_update_of_the_key_moves_the_row(spark, tmp_path):
    records = [
        canal(0, "INSERT", [{"id": "1", "v": "a"}, {"id": "5", "v": "e"}]),
        # UPDATE t SET id = 2 WHERE id = 1, and a plain update of row 5 in the same message
        canal(1, "UPDATE", [{"id": "2", "v": "a"}, {"id": "5", "v": "E"}], [{"id": "1"}, {"v": "e"}]),
    ]
    write_parquet(records, tmp_path / "archive" / "p.parquet")
    config = pipeline_config(tmp_path, "canal", "canal-json", tmp_path / "archive")
    assert replay_main(["--config", str(config), "--run-id", "r"]) == EXIT_OK
    assertDataFrameEqual(
        read_table(spark, str(tmp_path / "warehouse"), "canal", "shop.t").select("id", "v", "_op"),
        spark.createDataFrame([(2, "a", "update"), (5, "E", "update")], "id int, v string, _op string"),
    )


def test_a_configured_key_is_used_to_see_the_move(spark, tmp_path):
    records = [
        canal(0, "INSERT", [{"id": "1", "v": "a"}], pk=None),
        canal(1, "UPDATE", [{"id": "2", "v": "a"}], [{"id": "1"}], pk=None),
    ]
    write_parquet(records, tmp_path / "archive" / "p.parquet")
    config = pipeline_config(
        tmp_path, "canal", "canal-json", tmp_path / "archive", settings={"tables": {"shop.t": {"primary_key": ["id"]}}}
    )
    assert replay_main(["--config", str(config), "--run-id", "r"]) == EXIT_OK
    assertDataFrameEqual(
        read_table(spark, str(tmp_path / "warehouse"), "canal", "shop.t").select("id", "v"),
        spark.createDataFrame([(2, "a")], "id int, v string"),
    )
