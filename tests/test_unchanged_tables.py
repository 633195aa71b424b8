"""A nightly run rewrites the tables it changed and keeps the others as the previous version published them.

Tables a run applied no change to (no row change, no truncate) are linked into the new version (hard links: the
files stay when the old version is removed) and keep their audit; their published rows, counts and held-back rows
equal what a full rebuild publishes.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime

from archive_helpers import Record, pipeline_config, write_parquet

from cdcreplay.delta_tables import has_commits_after
from cdcreplay.entrypoints import EXIT_OK, replay_main
from cdcreplay.warehouse import PipelinePaths, read_current, read_table

TYPES = {"id": "int", "v": "varchar(8)"}


def canal(offset: int, kind: str, table: str, data: list[dict] | None, types: dict[str, str] = TYPES) -> Record:
    message = {"data": data, "old": None, "database": "shop", "table": table, "type": kind, "isDdl": False,
               "pkNames": ["id"], "mysqlType": types, "es": 1000 + offset, "id": offset}  # fmt: skip
    return Record("c", 0, offset, json.dumps(message))


NIGHT_1 = [
    canal(0, "INSERT", "a", [{"id": "1", "v": "a1"}, {"id": "2", "v": "a2"}]),
    canal(1, "INSERT", "b", [{"id": "1", "v": "abc"}, {"id": "2", "v": "7"}]),
    # b.v is declared int from here on: row 1 ("abc") no longer fits and is held back (a type conflict).
    canal(2, "INSERT", "b", [{"id": "3", "v": "5"}], {"id": "int", "v": "int"}),
    canal(3, "INSERT", "c", [{"id": "1", "v": "c1"}]),
]
NIGHT_2 = [canal(4, "UPDATE", "a", [{"id": "2", "v": "a2'"}])]  # only a changes
NIGHT_3 = [canal(5, "TRUNCATE", "c", None), canal(6, "INSERT", "c", [{"id": "9", "v": "c9"}])]  # only c


def archive_night(tmp_path, day: int, records: list[Record]) -> None:
    """The night's records, archived with that day's Kafka timestamps."""
    stamped = [dataclasses.replace(r, timestamp=datetime(2026, 1, day, 12, tzinfo=UTC)) for r in records]
    write_parquet(stamped, tmp_path / "archive" / f"day{day}" / "p.parquet")


def replay(tmp_path, warehouse: str, run_id: str, *options: str) -> dict:
    """One run of pipeline p over the archive into ``tmp_path/warehouse``, keeping one version; its summary."""
    (tmp_path / warehouse).mkdir(exist_ok=True)
    config = pipeline_config(tmp_path / warehouse, "p", "canal-json", tmp_path / "archive")
    config.write_text("keep_versions: 1\n" + config.read_text(encoding="utf-8"), encoding="utf-8")
    assert replay_main(["--config", str(config), "--run-id", run_id, *options]) == EXIT_OK
    summary_file = PipelinePaths(str(tmp_path / warehouse / "warehouse"), "p").run_file(run_id, "summary.json")
    return json.loads(summary_file.read_text(encoding="utf-8"))


def night(tmp_path, day: int, records: list[Record], *options: str) -> dict:
    archive_night(tmp_path, day, records)
    return replay(tmp_path, "w", f"n{day}", "--start", f"2026-01-0{day}T00:00:00+00:00", *options)


def published(spark, root) -> dict[str, list[dict]]:
    current = read_current(PipelinePaths(str(root / "warehouse"), "p"))
    return {
        table_id: sorted(
            (r.asDict() for r in read_table(spark, str(root / "warehouse"), "p", table_id).collect()), key=str
        )
        for table_id in current["tables"]
    }


def test_a_night_keeps_the_tables_it_did_not_change_and_publishes_what_a_full_rebuild_does(spark, tmp_path):
    first = night(tmp_path, 1, NIGHT_1, "--full-rebuild")
    assert {t: info["typed_in_version"] for t, info in first["tables"].items()} == dict.fromkeys(
        ("shop.a", "shop.b", "shop.c"), first["version"]
    )
    b_version = first["tables"]["shop.b"]["delta_version"]

    second = night(tmp_path, 2, NIGHT_2)
    assert {t: info["typed_in_version"] for t, info in second["tables"].items()} == {
        "shop.a": second["version"],
        "shop.b": first["version"],
        "shop.c": first["version"],
    }
    # Kept: the same Delta version (nothing committed to it), counts and held-back rows.
    assert second["tables"]["shop.b"]["delta_version"] == b_version
    assert not has_commits_after(second["tables"]["shop.b"]["path"], b_version)
    assert {t: (i["rows"], i["tombstones"], i["type_conflicts"]) for t, i in second["tables"].items()} == {
        "shop.a": (2, 0, 0),
        "shop.b": (2, 0, 1),
        "shop.c": (1, 0, 0),
    }
    # Only the changed table is audited again; the others passed when they were typed.
    assert sorted(second["quality"]["tables"]) == ["shop.a"]
    assert second["quality"]["unchanged_tables"] == ["shop.b", "shop.c"]

    # A truncate changes its table: c is typed again (a and b are kept, b since the first night).
    third = night(tmp_path, 3, NIGHT_3)
    assert {t: info["typed_in_version"] for t, info in third["tables"].items()} == {
        "shop.a": second["version"],
        "shop.b": first["version"],
        "shop.c": third["version"],
    }
    assert third["quality"]["unchanged_tables"] == ["shop.a", "shop.b"]
    # keep_versions 1 lets the first published version go, but b's Delta version is still the one it names.
    assert third["tables"]["shop.b"]["delta_version"] == b_version
    assert not has_commits_after(third["tables"]["shop.b"]["path"], b_version)

    # The same three nights as one full rebuild publish the same rows, provenance included.
    rebuilt = replay(tmp_path, "full", "all", "--full-rebuild")
    assert published(spark, tmp_path / "w") == published(spark, tmp_path / "full")
    assert {t: i["type_conflicts"] for t, i in rebuilt["tables"].items()} == {"shop.a": 0, "shop.b": 1, "shop.c": 0}
    assert [(r["id"], r["v"]) for r in published(spark, tmp_path / "w")["shop.c"]] == [(9, "c9")]


def test_a_table_published_without_its_typed_format_is_typed_again_though_no_row_changed(spark, tmp_path):
    """As after an upgrade from a release that did not record it (or one that types differently): the table is
    typed and audited again instead of kept."""
    night(tmp_path, 1, NIGHT_1, "--full-rebuild")
    paths = PipelinePaths(str(tmp_path / "w" / "warehouse"), "p")
    pointer = read_current(paths)
    del pointer["tables"]["shop.b"]["typed_format"]
    paths.current_file.write_text(json.dumps(pointer), encoding="utf-8")
    second = night(tmp_path, 2, NIGHT_2)
    assert second["quality"]["unchanged_tables"] == ["shop.c"]
    assert sorted(second["quality"]["tables"]) == ["shop.a", "shop.b"]
    assert second["tables"]["shop.b"]["typed_in_version"] == second["version"]
