# Spark 4.2.0 standalone master/worker from the pyspark wheel, on the same Python minor version (3.11) as the
# Airflow image, where the driver runs: PySpark refuses executors whose Python differs from the driver's.
# Build context: the repository root (docker compose does this).
FROM python:3.11.13-slim-bookworm

RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/*

# What the jobs' Python code needs on executors (decoders run in Python workers); no Airflow here.
RUN pip install --no-cache-dir pyspark==4.2.0 pandas==2.3.3 "pyarrow>=15" fastavro==1.13.1 pydantic pyyaml

# Same uid/gid as Airflow's user, so both sides can read and replace files in the shared archive/warehouse volumes.
RUN useradd --uid 50000 --gid 0 --home-dir /opt/spark-work --create-home spark \
    && mkdir -p /opt/cdcreplay/var/archive /opt/cdcreplay/var/warehouse \
    && chown -R 50000:0 /opt/cdcreplay \
    && chmod -R g+rwX /opt/cdcreplay

ENV SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/usr/local/bin/python3 \
    PYTHONPATH=/opt/cdcreplay/jobs \
    SPARK_NO_DAEMONIZE=1
ENV PATH=$SPARK_HOME/bin:$PATH

USER 50000
WORKDIR /opt/spark-work
CMD ["spark-class", "org.apache.spark.deploy.master.Master"]
