"""The Spark jars the product uses beyond pyspark's own, pinned in one place and fetched once at set-up.

pyspark ships Spark's core jars, not its optional modules: ``from_avro`` lives in spark-avro, published on Maven
Central beside every Spark release, and the published tables and the state are Delta Lake tables, whose jars Delta
publishes there too; Hadoop's S3A client and the AWS SDK reach s3a:// paths; Spark's Kafka source reads topics
straight from a cluster (``archive.layout: kafka``). ``scripts/setup.sh`` runs ``python -m cdcreplay.jars`` to
download each pinned jar into ``.venv/jars`` and check its SHA-1; nothing is downloaded at run time
(``--test-servers`` also fetches the servers the tests start: s3proxy and a Kafka broker). A session the package
starts puts the jars that are there on ``spark.jars`` (``cdcreplay.spark.build_session``); the DAG hands the same
paths to spark-submit. Without spark-avro, Debezium and DTS Avro decode in Python and say so; without Delta no run can
start (``cdcreplay.spark`` names the command that fetches it).
"""

from __future__ import annotations

import hashlib
import os
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
# Where the jars live: CDCREPLAY_JARS_DIR, else the project's virtualenv (jobs/cdcreplay/jars.py -> <repo>/.venv/jars).
JARS_DIR_VARIABLE = "CDCREPLAY_JARS_DIR"
DEFAULT_JARS_DIR = Path(__file__).resolve().parents[2] / ".venv" / "jars"


@dataclass(frozen=True)
class MavenJar:
    group: str
    artifact: str
    version: str
    sha1: str
    classifier: str = ""

    @property
    def file_name(self) -> str:
        return f"{self.artifact}-{self.version}{'-' + self.classifier if self.classifier else ''}.jar"

    def url(self, repository: str = MAVEN_CENTRAL) -> str:
        return f"{repository}/{self.group.replace('.', '/')}/{self.artifact}/{self.version}/{self.file_name}"


# Spark's Avro module, the same release as pyspark (requirements.txt): from_avro for the Avro formats. Its runtime
# dependency, Apache Avro itself, is among pyspark's own jars.
SPARK_AVRO = MavenJar("org.apache.spark", "spark-avro_2.13", "4.2.0", "f7bac541fa1d649096b85dcf3ffbef033c7c321c")
# Delta Lake for Spark 4.2 (the artifact names the Spark release it is built for) and its storage layer; the Python
# side is the delta-spark package of the same version (requirements.txt). Its other declared dependencies (the Delta
# kernel, Unity Catalog) serve catalog-managed tables, which the product does not use.
DELTA_SPARK = MavenJar("io.delta", "delta-spark_4.2_2.13", "4.4.0", "c2ab26421b8de44a2161b5e0b7da7954049f1ca1")
DELTA_STORAGE = MavenJar("io.delta", "delta-storage", "4.4.0", "a068e489ce20d7f79bc4ca2d3392f12adbb69ddd")
# S3 through Hadoop's S3A client: hadoop-aws at the Hadoop release pyspark 4.2.0 ships (3.5.0), the S3 analytics
# accelerator its input streams load even when not selected, and the AWS SDK v2 modules S3A calls (the SDK's "bundle"
# jar holds the same classes and every other service's too: 600 MB against these 9 MB). Versions as hadoop-aws 3.5.0
# declares them.
HADOOP_AWS = MavenJar("org.apache.hadoop", "hadoop-aws", "3.5.0", "9e594525d264c0db653c7f68da98b245f7d61ea5")
S3_JARS = (
    HADOOP_AWS,
    MavenJar(
        "software.amazon.s3.analyticsaccelerator",
        "analyticsaccelerator-s3",
        "1.3.1",
        "6c9bd0f6c440c9a78e82d272f5f0252d942419f6",
    ),
    MavenJar("software.amazon.awssdk", "annotations", "2.35.4", "0ee2f050aafed2b3b9393472a4fb35eb91c74555"),
    MavenJar("software.amazon.awssdk", "apache-client", "2.35.4", "406c25140a3a32ccd49ba3d752096a9fe2787ba3"),
    MavenJar("software.amazon.awssdk", "arns", "2.35.4", "d915a3104773b44533bd6f618a8c7b28c2e9d8a0"),
    MavenJar("software.amazon.awssdk", "auth", "2.35.4", "3a5f28f575d616813cad10a8db817984ed57d777"),
    MavenJar("software.amazon.awssdk", "aws-core", "2.35.4", "2f288fa2bac08dde3e9c74950bc9a7fe04913371"),
    MavenJar("software.amazon.awssdk", "aws-query-protocol", "2.35.4", "a4908689bc1285e192da926bd1d646d09d1d7def"),
    MavenJar("software.amazon.awssdk", "aws-xml-protocol", "2.35.4", "3a8c83d91ba7b41c29a2d84826e293ec4fa51386"),
    MavenJar("software.amazon.awssdk", "checksums", "2.35.4", "75d7256f1fa208224a3b23e2100941c0416f38a5"),
    MavenJar("software.amazon.awssdk", "checksums-spi", "2.35.4", "36eba96eccfc87a5de204f72ad215ac362d28755"),
    MavenJar("software.amazon.awssdk", "crt-core", "2.35.4", "eba7c2ddaef9938a072b4a6e58fd95ce8a7e0805"),
    MavenJar("software.amazon.awssdk", "endpoints-spi", "2.35.4", "5fd0e9e47a6fdf05ea5906ac38e0bce1268ab9f0"),
    MavenJar("software.amazon.eventstream", "eventstream", "1.0.1", "6ff8649dffc5190366ada897ba8525a836297784"),
    MavenJar("software.amazon.awssdk", "http-auth", "2.35.4", "ffa68c5e63d0f8ee9a5788029267cc450b5617c4"),
    MavenJar("software.amazon.awssdk", "http-auth-aws", "2.35.4", "d149f075bc7b5631754cbb1adfcd2c77aa932a1b"),
    MavenJar(
        "software.amazon.awssdk", "http-auth-aws-eventstream", "2.35.4", "2590b41716ea3fd938fe614321da9c5367f6868c"
    ),
    MavenJar("software.amazon.awssdk", "http-auth-spi", "2.35.4", "8b280ce879d02d3da134e61e303d8e6c5eacc988"),
    MavenJar("software.amazon.awssdk", "http-client-spi", "2.35.4", "3995875e3b834d39d708b661142949078babc34a"),
    MavenJar("software.amazon.awssdk", "identity-spi", "2.35.4", "75e3168376548e375560e4595ba6a768458c87c1"),
    MavenJar("software.amazon.awssdk", "json-utils", "2.35.4", "ca561bcb836814901bb8eda4089e451dcbf18024"),
    MavenJar("software.amazon.awssdk", "metrics-spi", "2.35.4", "a2065eca2ade2adb2a937d4e671b52704cffbdc5"),
    MavenJar("software.amazon.awssdk", "profiles", "2.35.4", "f9342cdd5f95a0d2f85bbedc3d25c3fc230beb51"),
    MavenJar("software.amazon.awssdk", "protocol-core", "2.35.4", "54d8a6bdbe86852311b80d2a5b782995d6d7d0b7"),
    MavenJar("org.reactivestreams", "reactive-streams", "1.0.4", "3864a1320d97d7b045f729a326e1e077661f31b7"),
    MavenJar("software.amazon.awssdk", "regions", "2.35.4", "83ab2f31cd9932dc274aa418cd4cbd761cbca3c8"),
    MavenJar("software.amazon.awssdk", "retries", "2.35.4", "02117c396b14d7db6c4b88d5c32b8380640a7bd0"),
    MavenJar("software.amazon.awssdk", "retries-spi", "2.35.4", "22196f00e2560aa9c74b6a74f62b8bd51a4b94b6"),
    MavenJar("software.amazon.awssdk", "s3", "2.35.4", "cc6cd77617d73cf9084d021e2693863bede49a4d"),
    MavenJar("software.amazon.awssdk", "s3-transfer-manager", "2.35.4", "6e4f2e5072fbc8551940eeed15220ddd11c684b2"),
    MavenJar("software.amazon.awssdk", "sdk-core", "2.35.4", "7de70ccba4959d32e7a2ec549d312378413d36c9"),
    MavenJar("software.amazon.awssdk", "sts", "2.35.4", "11042ac0ab4837496892379735e03873ff39a88d"),
    MavenJar(
        "software.amazon.awssdk", "third-party-jackson-core", "2.35.4", "980758655bc742236478439d753c634858846d1c"
    ),
    MavenJar("software.amazon.awssdk", "utils", "2.35.4", "8bf086b3b751b058fa62e7f0398d94db7295ebbe"),
    MavenJar("software.amazon.awssdk", "utils-lite", "2.35.4", "148d6b8801d9696c4cffff306dfdd3b96781af24"),
)
# Spark's Kafka source, for pipelines that replay straight from a cluster (`archive.layout: kafka`,
# cdcreplay.kafka_source): the same release as pyspark, its delegation-token module (loaded by the source even when no
# token is used), and the client library at the version spark-sql-kafka-0-10 4.2.0 declares (kafka-clients 3.9.2;
# a 3.9 client talks to any broker from 2.1 on, 4.x included), with the connection pool it caches consumers in.
# The source's other declared dependencies are among pyspark's own jars at the same versions (spark-tags, jsr305,
# scala-parallel-collections, hadoop-client-*), or at the newer versions Spark itself is built with (lz4-java,
# snappy-java, slf4j-api, scala-library): an older copy of those beside pyspark's would never be loaded, the
# application class loader finding pyspark's first.
KAFKA_SOURCE_JARS = (
    MavenJar("org.apache.spark", "spark-sql-kafka-0-10_2.13", "4.2.0", "98f199d5da59b1e152dae941cc5037a6495464ad"),
    MavenJar(
        "org.apache.spark", "spark-token-provider-kafka-0-10_2.13", "4.2.0", "807ceb26e2fa509259e74a202d5f2d790446f515"
    ),
    MavenJar("org.apache.kafka", "kafka-clients", "3.9.2", "a06edbaa01458ed2e8cf1be69a18c2f231fda6e0"),
    MavenJar("org.apache.commons", "commons-pool2", "2.13.1", "cf7e8c0242d4c483c42c083b8188ab360ab60f9a"),
)
PINNED = (SPARK_AVRO, DELTA_SPARK, DELTA_STORAGE, *S3_JARS, *KAFKA_SOURCE_JARS)
DELTA_JARS = (DELTA_SPARK, DELTA_STORAGE)
# A real S3 server for the tests (tests/s3_server.py starts it on 127.0.0.1): s3proxy on its local file system
# backend, one jar with its dependencies. scripts/test.sh fetches it with `python -m cdcreplay.jars --test-servers`
# into its own folder, apart from the jars Spark loads.
S3PROXY = MavenJar(
    "org.gaul", "s3proxy", "4.1.0", "0a0b89e982bc1b1b5757d45b61109e05a840dd87", classifier="jar-with-dependencies"
)
# A single-node Kafka broker for the tests (cdcreplay_lab/kafka_broker.py: KRaft, broker and controller in one JVM on
# 127.0.0.1): kafka_2.13 4.4.0 with its runtime dependencies as Maven resolves them (`mvn dependency:tree` of that
# one artifact), plus log4j's SLF4J binding so the broker's log says why it stopped. It runs in a JVM of its own with
# exactly these on its classpath, so nothing here is shared with, or excluded because of, pyspark's jars.
KAFKA_BROKER = (
    MavenJar("at.yawk.lz4", "lz4-java", "1.11.2", "3fe7cb28a7102752d77c3aa4e309ea76efe85def"),
    MavenJar("com.dynatrace.hash4j", "hash4j", "0.22.0", "2d61bfb5b38469cb76141b06dc68d36a9007e9ad"),
    MavenJar("com.fasterxml.jackson.core", "jackson-annotations", "2.21", "b1bc1868bf02dc0bd6c7836257a036a331005309"),
    MavenJar("com.fasterxml.jackson.core", "jackson-core", "2.21.7", "5abfb904683e642f4a5458f2a78ab9308c7c5a46"),
    MavenJar("com.fasterxml.jackson.core", "jackson-databind", "2.21.7", "a2ebbc72e3092323f0f3defa786ff3bb0c47218c"),
    MavenJar(
        "com.fasterxml.jackson.dataformat",
        "jackson-dataformat-yaml",
        "2.21.7",
        "cd755d8f2c860e887301b47140f60ab58b3eb538",
    ),
    MavenJar(
        "com.fasterxml.jackson.datatype", "jackson-datatype-jdk8", "2.21.7", "83f1c3c394b531496917e86e886aa00ac5cecc63"
    ),
    MavenJar("com.github.ben-manes.caffeine", "caffeine", "3.2.0", "35eba09997476a39492ac7f7b2bb0e8292c09d17"),
    MavenJar("com.github.luben", "zstd-jni", "1.5.7-17", "b4fea046fcd925681fa10c61be99da059f4f745a"),
    MavenJar("com.google.re2j", "re2j", "1.8", "12c25e923e9e4fb1575a7640a2698745c6f19a94"),
    MavenJar("com.typesafe.scala-logging", "scala-logging_2.13", "3.9.6", "f887ff84d87e3e9c89e28f8a4064bf74d1eacbb4"),
    MavenJar("com.yammer.metrics", "metrics-core", "2.2.0", "f82c035cfa786d3cbec362c38c22a5f5b1bc8724"),
    MavenJar("commons-beanutils", "commons-beanutils", "1.11.0", "ac03ea606d13de04c2e4508227680faff151f491"),
    MavenJar("commons-collections", "commons-collections", "3.2.2", "8ad72fe39fa8c91eaaf12aadb21e0c3661fe26d5"),
    MavenJar("commons-digester", "commons-digester", "2.1", "73a8001e7a54a255eef0f03521ec1805dc738ca0"),
    MavenJar("commons-logging", "commons-logging", "1.3.5", "a3fcc5d3c29b2b03433aa2d2f2d2c1b1638924a1"),
    MavenJar("commons-validator", "commons-validator", "1.10.1", "cdf5c2a69aad509c4db54786f19f1e1ccc471bcf"),
    MavenJar("net.sf.jopt-simple", "jopt-simple", "5.0.4", "4fdac2fbe92dfad86aa6e9301736f6b4342a3f5c"),
    MavenJar("net.sourceforge.argparse4j", "argparse4j", "0.7.0", "6f0621d0c3888de39e0f06d01f37ba53a798e657"),
    MavenJar("org.apache.kafka", "kafka-clients", "4.4.0", "1d2ebc2a3f0ecce03faa288c42d4e8f998aac47d"),
    MavenJar("org.apache.kafka", "kafka-coordinator-common", "4.4.0", "531d4e04ea04d79decd585ca7930f57757554ca5"),
    MavenJar("org.apache.kafka", "kafka-group-coordinator", "4.4.0", "07dfc73a2de9499589557071cbd595f6e14694eb"),
    MavenJar("org.apache.kafka", "kafka-group-coordinator-api", "4.4.0", "5159f9226c8930035cdd5140b6a24df25a588061"),
    MavenJar("org.apache.kafka", "kafka-metadata", "4.4.0", "5ade78a65abb3870b33f669a5a0b449de52093a2"),
    MavenJar("org.apache.kafka", "kafka-raft", "4.4.0", "a8da7a1d71c6b4ad3f96cdb3af977df216d595df"),
    MavenJar("org.apache.kafka", "kafka-server", "4.4.0", "3a8174850ed33c7669841fad1795b79c1d205bf5"),
    MavenJar("org.apache.kafka", "kafka-server-common", "4.4.0", "f6125385dd7c41b0a20a75f240666e495158e235"),
    MavenJar("org.apache.kafka", "kafka-share-coordinator", "4.4.0", "3e4b92a3a179eb435f3807b567a83611b4eb0baf"),
    MavenJar("org.apache.kafka", "kafka-storage", "4.4.0", "b215580ff932405e06e55969d16b63a37c2d2ff2"),
    MavenJar("org.apache.kafka", "kafka-storage-api", "4.4.0", "536348c3f5face8e0788b9e47b6f2337899194be"),
    MavenJar("org.apache.kafka", "kafka-tools-api", "4.4.0", "4e9326543b4c45cb5db9178aa25cb91fb05685cf"),
    MavenJar("org.apache.kafka", "kafka-transaction-coordinator", "4.4.0", "32fc9c405002f44bc06eb266df42fa82dde13823"),
    MavenJar("org.apache.kafka", "kafka_2.13", "4.4.0", "2e194c128f7bd43bef49f5647be34d680f6a6474"),
    MavenJar("org.apache.logging.log4j", "log4j-api", "2.25.5", "6c80ea65e41f7858f7e15cb390c98c36167c7b3a"),
    MavenJar("org.apache.logging.log4j", "log4j-core", "2.25.5", "c194a13e18b0a36014e867d2d323b989bf212151"),
    MavenJar("org.apache.logging.log4j", "log4j-slf4j-impl", "2.25.5", "542f388168432b2dfce12edde0d99c01649c4873"),
    MavenJar("org.bitbucket.b_c", "jose4j", "0.9.6", "357a3836bb5da16f314f3a1e954518e5468cd915"),
    MavenJar("org.hdrhistogram", "HdrHistogram", "2.2.2", "7959933ebcc0f05b2eaa5af0a0c8689fa257b15c"),
    MavenJar("org.jspecify", "jspecify", "1.0.0", "7425a601c1c7ec76645a78d22b8c6a627edee507"),
    MavenJar("org.pcollections", "pcollections", "4.0.2", "c8398b4443deae11e6eaffbc04a371b4eb8f6b8e"),
    MavenJar("org.scala-lang", "scala-library", "2.13.18", "eb2086988c25b08705472cc750654570900362e5"),
    MavenJar("org.scala-lang", "scala-reflect", "2.13.18", "674f3bd39f5c528d575da69c42a5dff772b9b75c"),
    MavenJar("org.slf4j", "slf4j-api", "1.7.36", "6c62681a2f655b49963a5983b8b0950a6120ae14"),
    MavenJar("org.xerial.snappy", "snappy-java", "1.1.10.7", "3049f95640f4625a945cfab85715f603fa4c8f80"),
    MavenJar("org.yaml", "snakeyaml", "2.5", "2d53ddec134280cb384c1e35d094e5f71c1f2316"),
)
TEST_SERVERS = (S3PROXY, *KAFKA_BROKER)
TEST_SERVERS_FOLDER = "test-servers"


def jars_dir() -> Path:
    return Path(os.environ.get(JARS_DIR_VARIABLE) or DEFAULT_JARS_DIR)


def jar_path(jar: MavenJar) -> Path:
    if jar in TEST_SERVERS:
        return jars_dir() / TEST_SERVERS_FOLDER / jar.file_name
    return jars_dir() / jar.file_name


def installed_jars() -> list[str]:
    """The paths of the pinned jars that are in place, for ``spark.jars``."""
    return [str(jar_path(jar)) for jar in PINNED if jar_path(jar).is_file()]


def _sha1(path: Path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()


def fetch(jar: MavenJar, repository: str = MAVEN_CENTRAL) -> Path:
    """Download ``jar`` from a Maven ``repository`` unless it is in place with the pinned checksum; a wrong checksum
    is an error, not a jar."""
    target = jar_path(jar)
    if target.is_file() and _sha1(target) == jar.sha1:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".part")
    url = jar.url(repository)
    with urllib.request.urlopen(url, timeout=120) as response:
        partial.write_bytes(response.read())
    found = _sha1(partial)
    if found != jar.sha1:
        partial.unlink()
        raise RuntimeError(f"{url}: SHA-1 {found}, pinned {jar.sha1}; not installed")
    partial.replace(target)
    return target


def main(pinned: tuple[MavenJar, ...] = PINNED, repository: str = MAVEN_CENTRAL) -> int:
    for jar in pinned:
        try:
            print(f"jars: {fetch(jar, repository)}")
        except (OSError, RuntimeError) as error:
            print(f"jars: cannot fetch {jar.url(repository)}: {error}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(PINNED + TEST_SERVERS if "--test-servers" in sys.argv[1:] else PINNED))
