"""A key's story in words, for the terminal (``--json`` writes the same story as data)."""

from __future__ import annotations

import json

from cdcreplay.explain.story import READ_STATUSES, Event, Explanation

MAX_IMAGE_TEXT = 400


def render_explanation(story: Explanation) -> str:
    lines = [
        f"pipeline {story.pipeline} ({story.format}), table {story.table_id}, key {_compact(story.key)}",
        f"  key text {story.key_text}; as of run {story.run_id}; runs read, oldest first: "
        + (", ".join(story.runs) or "(none)"),
    ]
    lines += _sources(story)
    lines += _events(story)
    lines += _winner(story)
    lines += _reconciliation(story)
    lines += _lost_changes(story)
    lines += _quarantined(story)
    lines += _state(story)
    lines += _published(story)
    if story.notes:
        lines.append("notes:")
        lines += [f"  {note}" for note in story.notes]
    return "\n".join(lines)


def _compact(value) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=False)
    return text if len(text) <= MAX_IMAGE_TEXT else text[: MAX_IMAGE_TEXT - 3] + "..."


def _sources(story: Explanation) -> list[str]:
    lines = ["where it comes from:"]
    for source in story.sources:
        run = f"run {source.run_id} " if source.run_id else ""
        found = f": {source.rows} row(s) of the key" if source.status in READ_STATUSES else f": {source.status.upper()}"
        note = f" ({source.note})" if source.note else ""
        lines.append(f"  {run}{source.kind} {source.path}{found}{note}")
    return lines


def _coordinates(event: Event) -> str:
    return f"{event.topic}[{event.partition}]@{event.offset}" + (f" row {event.row_index}" if event.row_index else "")


def _events(story: Explanation) -> list[str]:
    if not story.events:
        return ["events: none archived for this key in the runs read"]
    lines = ["events, in compaction order (source position, then Kafka partition, offset, row in the message):"]
    for event in story.events:
        mark = "*" if event.winner else " "
        lines.append(
            f" {mark}#{event.seq:<3} {event.op:<9} position {event.position}  {_coordinates(event)}  "
            f"{event.event_time}  run {', '.join(event.runs)}" + ("  <- WINNER" if event.winner else "")
        )
        if event.epoch is not None:
            epoch = event.epoch
            known = (
                f"epoch {epoch.epoch_no} of run {epoch.run_id} ({epoch.kind})" if epoch.epoch_no else "epoch unknown"
            )
            lines.append(f"        snapshot read: {known}")
        if event.op not in ("delete", "truncate"):
            lines.append(f"        changed: {', '.join(event.changed_columns) or '(nothing)'}")
            lines.append(f"        image after: {_compact(event.image_after)}")
    return lines


def _winner(story: Explanation) -> list[str]:
    if story.winner is None:
        return []
    won = story.winner
    return [f"winner: #{won.seq}, the key is {won.effect}: {won.reason}"]


def _reconciliation(story: Explanation) -> list[str]:
    if not story.reconciliation:
        return ["reconciliation: no snapshot epoch of the runs read compared this key"]
    lines = ["reconciliation:"]
    for row in story.reconciliation:
        columns = "; ".join(
            f"{d['column']}: snapshot {d['snapshot_value']!r}, incremental {d['incremental_value']!r}"
            for d in row.differing_columns
        )
        sides = f"snapshot #{row.snapshot_seq}" if row.snapshot_seq else "not read by the snapshot"
        sides += f", incremental #{row.incremental_seq}" if row.incremental_seq else ", no incremental value"
        lines.append(
            f"  run {row.run_id} epoch {row.epoch_no}: {row.status}"
            + (f" ({columns})" if columns else "")
            + f"; {sides}"
        )
    return lines


def _lost_changes(story: Explanation) -> list[str]:
    if not story.lost_changes:
        return []
    lines = ["lost changes:"]
    for lost in story.lost_changes:
        lines.append(f"  {'PROVEN: ' if lost.proven else ''}{lost.text}")
    return lines


def _quarantined(story: Explanation) -> list[str]:
    if not story.quarantined:
        return ["quarantined records naming this key: none"]
    lines = ["quarantined records naming this key:"]
    for q in story.quarantined:
        lines.append(
            f"  {q.topic}[{q.partition}]@{q.offset} ({q.timestamp}) run {q.run_id}: {q.reason}: {q.detail} "
            f"(matched by its {q.matched_by.replace('_', ' ')})"
        )
    return lines


def _state(story: Explanation) -> list[str]:
    lines = []
    if story.state is not None:
        state = story.state
        what = "tombstone" if state.deleted else "live row"
        event = f"#{state.seq}" if state.seq else f"{state.topic}[{state.partition}]@{state.offset}"
        lines.append(f"state (version {state.state_version}): {what}, from {event} ({state.op})")
    if story.tombstone is not None:
        lines.append(f"tombstone: {story.tombstone.policy}")
    return lines


def _published(story: Explanation) -> list[str]:
    published = story.published
    if published is None:
        return ["published row: not read"]
    where = f"published version {published.version} (run {published.run_id}, Delta version {published.delta_version})"
    if published.row is None:
        return [f"published row: none in {where}"]
    origin = f" = #{published.seq}" if published.seq else ""
    return [
        f"published row in {where}:",
        f"  {_compact(published.row)}",
        f"  provenance{origin}: {_compact(published.provenance)}",
    ]
