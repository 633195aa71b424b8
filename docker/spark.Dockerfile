# Spark 4.2.0 standalone master and workers from the pyspark wheel, on the same Python minor version (3.11) as the
# Airflow image, where the driver runs: PySpark refuses executors whose Python differs from the driver's.
# The image has the jobs' dependencies (executor-requirements.txt) but NOT the cdcreplay package: the DAG ships it
# to the executors with spark-submit --py-files (CDCREPLAY_PY_FILES), as on any cluster.
# Build context: the repository root (docker compose does this).
FROM python:3.11.13-slim-bookworm

RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/*

COPY docker/executor-requirements.txt /tmp/executor-requirements.txt
RUN pip install --no-cache-dir -r /tmp/executor-requirements.txt

# Same uid/gid as Airflow's user, so both sides can read and replace files in the shared archive/warehouse volumes.
RUN useradd --uid 50000 --gid 0 --home-dir /opt/spark-work --create-home spark \
    && mkdir -p /opt/cdcreplay/var/archive /opt/cdcreplay/var/warehouse \
    && chown -R 50000:0 /opt/cdcreplay \
    && chmod -R g+rwX /opt/cdcreplay

ENV SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/usr/local/bin/python3 \
    SPARK_NO_DAEMONIZE=1
ENV PATH=$SPARK_HOME/bin:$PATH

USER 50000
WORKDIR /opt/spark-work
CMD ["spark-class", "org.apache.spark.deploy.master.Master"]
