# Spark 4.2.0 standalone master and workers from the pyspark wheel, on the same Python minor version (3.11) as the
# Airflow image, where the driver runs: PySpark refuses executors whose Python differs from the driver's.
# The image has the jobs' dependencies (executor-requirements.txt) but NOT the cdcreplay package: the DAG ships it
# to the executors with spark-submit --py-files (CDCREPLAY_PY_FILES), as on any cluster. Nor the extra Spark jars
# (Delta Lake, spark-avro, hadoop-aws and the AWS SDK for s3a://): spark-submit --jars ships them from the Airflow image.
# Build context: the repository root (docker compose does this).
FROM python:3.11.13-slim-bookworm

RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/*

COPY docker/executor-requirements.txt /tmp/executor-requirements.txt
RUN pip install --no-cache-dir -r /tmp/executor-requirements.txt

# An unprivileged user for the master, the workers and the executors; its home is the workers' work dir. The data
# is in MinIO (s3a://): nothing of it is on this image's file system.
RUN useradd --uid 50000 --gid 0 --home-dir /opt/spark-work --create-home spark

ENV SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/usr/local/bin/python3 \
    SPARK_NO_DAEMONIZE=1
ENV PATH=$SPARK_HOME/bin:$PATH

USER 50000
WORKDIR /opt/spark-work
CMD ["spark-class", "org.apache.spark.deploy.master.Master"]
