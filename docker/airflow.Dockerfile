# Airflow 3.3.2 with Java 17, Spark 4.2.0's spark-submit and the cdcreplay dependencies.
# The Spark driver runs here (client mode), so Python and the libraries must match the Spark workers' image
# (docker/spark.Dockerfile): both are Python 3.11, and executor-requirements.txt pins pyspark, pandas, pyarrow, ...
# for both (here as constraints on requirements.txt).
# Build context: the repository root (docker compose does this).
FROM apache/airflow:3.3.2-python3.11

USER root
# The Debian release's default Java (17 on bookworm, 21 on trixie): Spark 4.2 runs on both, and the image's Debian
# release is the Airflow project's choice, not ours.
RUN apt-get update \
    && apt-get install -y --no-install-recommends default-jre-headless \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/* \
    # Folders that named volumes mount over: a fresh volume takes this ownership (the airflow user, group 0).
    # The archive and the warehouse are in MinIO (s3a://), not in volumes.
    && mkdir -p /opt/airflow/auth /opt/cdcreplay/var/dist /opt/cdcreplay-jars \
    && chown -R airflow:0 /opt/airflow/auth /opt/cdcreplay /opt/cdcreplay-jars \
    && chmod -R g+rwX /opt/airflow/auth /opt/cdcreplay

USER airflow
# apache-airflow is pinned again so that no dependency can upgrade it (the image's documented practice).
# confluent-kafka (pinned as in requirements-dev.txt) is the demo-data service's producer for the stack's broker;
# the jobs read Kafka through Spark.
COPY --chown=airflow:0 requirements.txt /tmp/cdcreplay-requirements.txt
COPY --chown=airflow:0 docker/executor-requirements.txt /tmp/executor-requirements.txt
RUN pip install --no-cache-dir "apache-airflow==3.3.2" -r /tmp/cdcreplay-requirements.txt \
    "confluent-kafka==2.16.1" -c /tmp/executor-requirements.txt
# The pinned Spark jars (cdcreplay.jars: spark-avro, Delta Lake, hadoop-aws and the AWS SDK modules for s3a://) from
# Maven Central, checked against their SHA-1: the DAG's spark-submit hands every jar of CDCREPLAY_JARS_DIR to the driver
# and ships them to the executors (--jars), so the Spark image needs none of them. jars.py is copied at its place in
# the repository's layout: it computes its default folder from its own path (two levels up), which /tmp/jars.py has not.
COPY --chown=airflow:0 jobs/cdcreplay/jars.py /tmp/cdcreplay-build/jobs/cdcreplay/jars.py
ENV CDCREPLAY_JARS_DIR=/opt/cdcreplay-jars
RUN python /tmp/cdcreplay-build/jobs/cdcreplay/jars.py

# The repository's code is mounted at /opt/cdcreplay (see docker-compose.yml), not baked in: edit, then rerun.
# Airflow (validate_run, report) and the Spark driver import cdcreplay from there; the executors get the zip that
# the demo-data service builds from it.
ENV PYTHONPATH=/opt/cdcreplay/jobs \
    CDCREPLAY_EXPECTATIONS_DIR=/opt/cdcreplay/expectations
