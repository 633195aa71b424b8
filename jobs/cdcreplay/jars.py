"""The Spark jars the product uses beyond pyspark's own, pinned in one place and fetched once at set-up.

pyspark ships Spark's core jars, not its optional modules: ``from_avro`` lives in spark-avro, published on Maven
Central beside every Spark release, and the published tables and the state are Delta Lake tables, whose jars Delta
publishes there too. ``scripts/setup.sh`` runs ``python -m cdcreplay.jars`` to download each pinned
jar into ``.venv/jars`` and check its SHA-1; nothing is downloaded at run time. A session the package starts puts the
jars that are there on ``spark.jars`` (``cdcreplay.spark.build_session``); the DAG hands the same paths to
spark-submit. Without spark-avro, Debezium Avro decodes in Python and says so; without Delta no run can start
(``cdcreplay.spark`` names the command that fetches it).
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

    @property
    def file_name(self) -> str:
        return f"{self.artifact}-{self.version}.jar"

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
PINNED = (SPARK_AVRO, DELTA_SPARK, DELTA_STORAGE)
DELTA_JARS = (DELTA_SPARK, DELTA_STORAGE)


def jars_dir() -> Path:
    return Path(os.environ.get(JARS_DIR_VARIABLE) or DEFAULT_JARS_DIR)


def jar_path(jar: MavenJar) -> Path:
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
    sys.exit(main())
