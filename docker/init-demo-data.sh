#!/usr/bin/env bash
# The one-shot `demo-data` service of docker-compose.yml (also runnable by hand in any Airflow container):
#  1. build the job package that the DAG ships to the Spark executors with --py-files ($CDCREPLAY_PY_FILES);
#     rebuilt at every `docker compose up`, so the executors run the code that is mounted from jobs/;
#  2. write a simulated archive for every pipeline of $CDCREPLAY_CONFIG whose archive is missing or empty (an archive
#     already there, simulated or real, is left alone). A local archive folder is written in place; an s3a:// archive
#     is simulated into a temporary folder, then uploaded below its prefix (cdcreplay.storage.Location), with the
#     S3 settings of the AWS_* environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL:
#     the demo-data service has them; export them first when running this by hand). The bucket must exist.
#  3. produce a simulated history to the brokers of every Kafka pipeline (archive.layout: kafka) none of whose topics
#     exist yet, at the simulator's offsets (cdcreplay_lab.kafka_broker.produce; confluent-kafka is in the image for
#     this). Topics that exist are left alone, whatever they hold.
set -euo pipefail
: "${CDCREPLAY_CONFIG:?set CDCREPLAY_CONFIG to the pipelines file}"
: "${CDCREPLAY_PY_FILES:?set CDCREPLAY_PY_FILES to where the job package goes}"

python -m cdcreplay.cli package --out "$CDCREPLAY_PY_FILES"
python - <<'PYTHON'
import os
import tempfile
from pathlib import Path

from cdcreplay.config import load_config
from cdcreplay_lab.simulator import build_sample_archive
from cdcreplay.storage import Location

config = load_config(os.environ["CDCREPLAY_CONFIG"])
events = int(os.environ.get("CDCREPLAY_DEMO_EVENTS") or 5000)


def simulate(pipeline, folder):
    return build_sample_archive(
        folder, pipeline.format, events=events, seed=20260101, days=2, layout=pipeline.archive.layout
    )


def feed(pipeline):
    """The simulated history of the pipeline's format on its brokers, unless one of its topics exists already."""
    from confluent_kafka.admin import AdminClient

    from cdcreplay_lab.kafka_broker import produce
    from cdcreplay_lab.simulator.encoders import encoder
    from cdcreplay_lab.simulator.history import simulate as simulate_history

    servers = ",".join(pipeline.archive.bootstrap_servers)
    existing = set(AdminClient({"bootstrap.servers": servers}).list_topics(timeout=60).topics)
    if existing & set(pipeline.topics):
        print(f"{pipeline.name}: {', '.join(sorted(existing & set(pipeline.topics)))} already on {servers}; left as it is")
        return
    history = simulate_history(seed=20260101, events=events, days=2)
    with tempfile.TemporaryDirectory(prefix=f"cdcreplay-demo-{pipeline.name}-") as folder:
        records = list(encoder(pipeline.format).encode(history, Path(folder)))
    simulated = sorted({r.topic for r in records})
    if sorted(pipeline.topics) != simulated:
        raise SystemExit(
            f"pipelines.{pipeline.name}.topics: the demo feed writes {', '.join(simulated)}; name exactly these topics"
        )
    produce(servers, records)
    print(
        f"{pipeline.name}: produced {history.event_count} row events ({pipeline.format}) -> {len(records)} Kafka "
        f"records to {', '.join(simulated)} on {servers}"
    )


for pipeline in config.project.pipelines:
    if pipeline.archive.layout == "kafka":
        feed(pipeline)
        continue
    target = Location(config.archive_path(pipeline))
    if target.is_local:
        folder = Path(str(target))
        if folder.is_dir() and any(folder.iterdir()):
            print(f"{pipeline.name}: {folder} already holds an archive; left as it is")
            continue
        history = simulate(pipeline, folder)
    else:
        # An object store has no empty folders: the prefix exists once any object is below it.
        if target.exists():
            print(f"{pipeline.name}: {target} already holds an archive; left as it is")
            continue
        with tempfile.TemporaryDirectory(prefix=f"cdcreplay-demo-{pipeline.name}-") as folder:
            history = simulate(pipeline, Path(folder))
            target.upload_tree(folder)
    print(
        f"{pipeline.name}: simulated {history.event_count} row events ({pipeline.format}) -> "
        f"{history.archive['records']} Kafka records under {target}"
    )
PYTHON
