"""The Spark jars the product uses beyond pyspark's own, pinned in one place and fetched once at set-up.

pyspark ships Spark's core jars, not its optional modules: ``from_avro`` lives in spark-avro, published on Maven
Central beside every Spark release, and the published tables and the state are Delta Lake tables, whose jars Delta
publishes there too; Hadoop's S3A client and the AWS SDK reach s3a:// paths. ``scripts/setup.sh`` runs
``python -m cdcreplay.jars`` to download each pinned jar into ``.venv/jars`` and check its SHA-1; nothing is
downloaded at run time (``--test-servers`` also fetches the servers the tests start: s3proxy). A session the package
starts puts the jars that are there on ``spark.jars`` (``cdcreplay.spark.build_session``); the DAG hands the same
paths to spark-submit. Without spark-avro, Debezium Avro decodes in Python and says so; without Delta no run can
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
PINNED = (SPARK_AVRO, DELTA_SPARK, DELTA_STORAGE, *S3_JARS)
DELTA_JARS = (DELTA_SPARK, DELTA_STORAGE)
# A real S3 server for the tests (tests/s3_server.py starts it on 127.0.0.1): s3proxy on its local file system
# backend, one jar with its dependencies. scripts/test.sh fetches it with `python -m cdcreplay.jars --test-servers`
# into its own folder, apart from the jars Spark loads.
S3PROXY = MavenJar(
    "org.gaul", "s3proxy", "4.1.0", "0a0b89e982bc1b1b5757d45b61109e05a840dd87", classifier="jar-with-dependencies"
)
TEST_SERVERS = (S3PROXY,)
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
