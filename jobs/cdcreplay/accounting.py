"""Every record read is accounted for: per topic partition, the distinct records the read stage selected equal the
records the decode turned into changelog rows, control rows or quarantine rows. A record that vanished or was
invented is a decoder bug, and the run publishes nothing."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from cdcreplay.formats.common import KIND_CHANGE, KIND_CONTROL, KIND_QUARANTINE
from cdcreplay.run_spec import RunSpec
from cdcreplay.schema import CONTROL_NOTE


class AccountingError(RuntimeError):
    """Records read and records accounted for (changelog + control + quarantine) disagree."""


def decoded_counts(spark: SparkSession, decoded_dir: str, manifest: dict) -> dict:
    """What the decode made of the records the ``manifest`` says were read: rows per kind, reason, control kind and
    table, and per topic partition the distinct records accounted for as changelog, control or quarantine."""
    decoded = spark.read.parquet(decoded_dir)
    # Notes (how a decoder read records the config left open) are counted per text for the run summary.
    note = F.when(F.col("control_kind") == CONTROL_NOTE, F.col("detail")).alias("note")
    per_kind = (
        decoded.groupBy("record_kind", "reason", "control_kind", "table_id", note)
        .agg(F.count(F.lit(1)).alias("rows"))
        .collect()
    )
    # Each distinct record is accounted for once: quarantined when any of its rows is (a multi-row message with one
    # bad row still applies its good rows), else changelog when it has a row change, else control.
    per_record = decoded.groupBy("topic", "partition", "offset").agg(
        *[
            F.max((F.col("record_kind") == kind).cast("int")).alias(name)
            for name, kind in (("quarantined", KIND_QUARANTINE), ("change", KIND_CHANGE), ("control", KIND_CONTROL))
        ]
    )
    changelog_only = (F.col("quarantined") == 0) & (F.col("change") == 1)
    control_only = (F.col("quarantined") == 0) & (F.col("change") == 0) & (F.col("control") == 1)
    per_partition = (
        per_record.groupBy("topic", "partition")
        .agg(
            F.count(F.lit(1)).alias("decoded_records"),
            F.sum(changelog_only.cast("int")).alias("changelog_records"),
            F.sum(control_only.cast("int")).alias("control_records"),
            F.sum("quarantined").alias("quarantined_records"),
        )
        .collect()
    )
    # What was read per partition, as the run's manifest recorded it before decoding.
    partitions: dict[str, dict[str, dict]] = {}
    empty = {"changelog_records": 0, "control_records": 0, "quarantined_records": 0}
    for extent in manifest["partitions"]:
        partitions.setdefault(extent["topic"], {})[str(extent["partition"])] = {
            "records_read": extent["records"],
            "distinct_records": extent["distinct_offsets"],
            **empty,
        }
    for row in per_partition:
        read = {"records_read": 0, "distinct_records": 0, **empty}
        counts_of = partitions.setdefault(row.topic, {}).setdefault(str(row.partition), read)
        counts_of.update({name: row[name] for name in empty})
    records = sum(row.decoded_records for row in per_partition)
    counts = {
        "source_records": records,
        "partitions": partitions,
        "changelog_rows": 0,
        "control_rows": 0,
        "quarantined": 0,
        "quarantine_by_reason": {},
        "control_by_kind": {},
        "changes_by_table": {},
        "notes": {},
    }
    for row in per_kind:
        if row.note is not None:
            counts["notes"][row.note] = counts["notes"].get(row.note, 0) + row.rows
        if row.record_kind == KIND_CHANGE:
            counts["changelog_rows"] += row.rows
            counts["changes_by_table"][row.table_id] = counts["changes_by_table"].get(row.table_id, 0) + row.rows
        elif row.record_kind == KIND_CONTROL:
            counts["control_rows"] += row.rows
            counts["control_by_kind"][row.control_kind] = counts["control_by_kind"].get(row.control_kind, 0) + row.rows
        elif row.record_kind == KIND_QUARANTINE:
            counts["quarantined"] += row.rows
            counts["quarantine_by_reason"][row.reason] = counts["quarantine_by_reason"].get(row.reason, 0) + row.rows
    return counts


def check_accounting(kinds: dict, manifest: dict, spec: RunSpec) -> None:
    """Per topic partition, every distinct record read is accounted for exactly once, as a changelog, control or
    quarantined record: none vanished, none was invented."""
    if spec.tables:
        return  # records of other tables are left out on purpose
    problems = []
    for topic, partitions in sorted(kinds["partitions"].items()):
        for partition, c in sorted(partitions.items(), key=lambda item: int(item[0])):
            accounted = c["changelog_records"] + c["control_records"] + c["quarantined_records"]
            if accounted != c["distinct_records"]:
                problems.append(
                    f"topic {topic} partition {partition}: read {c['distinct_records']} distinct records but "
                    f"{accounted} are accounted for (changelog {c['changelog_records']}, control "
                    f"{c['control_records']}, quarantined {c['quarantined_records']})"
                )
    if problems or kinds["source_records"] != manifest["distinct_records"]:
        problems = problems or [
            f"read {manifest['distinct_records']} distinct records but decoded rows account for "
            f"{kinds['source_records']}"
        ]
        raise AccountingError(
            "records read and records accounted for disagree: "
            + "; ".join(problems)
            + ". Nothing was published. This is a bug in the decoder: please report it with the run's manifest"
        )
