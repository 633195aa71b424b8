#!/usr/bin/env bash
# The one-shot `demo-data` service of docker-compose.yml (also runnable by hand in any Airflow container):
#  1. build the job package that the DAG ships to the Spark executors with --py-files ($CDCREPLAY_PY_FILES);
#     rebuilt at every `docker compose up`, so the executors run the code that is mounted from jobs/;
#  2. write a simulated archive for every pipeline of $CDCREPLAY_CONFIG whose archive folder is missing or empty
#     (an archive already there, simulated or real, is left alone).
set -euo pipefail
: "${CDCREPLAY_CONFIG:?set CDCREPLAY_CONFIG to the pipelines file}"
: "${CDCREPLAY_PY_FILES:?set CDCREPLAY_PY_FILES to where the job package goes}"

python -m cdcreplay.cli package --out "$CDCREPLAY_PY_FILES"
python - <<'PYTHON'
import os
from pathlib import Path

from cdcreplay.config import load_config
from cdcreplay.simulator import build_sample_archive

config = load_config(os.environ["CDCREPLAY_CONFIG"])
events = int(os.environ.get("CDCREPLAY_DEMO_EVENTS") or 5000)
for pipeline in config.project.pipelines:
    folder = Path(config.archive_path(pipeline))
    if folder.is_dir() and any(folder.iterdir()):
        print(f"{pipeline.name}: {folder} already holds an archive; left as it is")
        continue
    history = build_sample_archive(
        folder, pipeline.format, events=events, seed=20260101, days=2, layout=pipeline.archive.layout
    )
    print(
        f"{pipeline.name}: simulated {history.event_count} row events ({pipeline.format}) -> "
        f"{history.archive['records']} Kafka records under {folder}"
    )
PYTHON
