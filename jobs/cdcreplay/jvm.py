"""The options of the JVMs the jobs run in: the garbage collector, and the class archive a driver starts from.

Nothing is imported here: the DAG file names the same options for its spark-submit tasks when it is parsed (one
definition, not a copy).

**The collector.** The throughput collector for drivers and executors. Decoding allocates short-lived strings at a
high rate; G1, the JVM's default, spends CPU beside the tasks (concurrent marking and refinement, costlier write
barriers) that a small machine does not have to spare. The 2M-event Debezium replay on 2 cores: 162 -> 135 s
(docs/benchmarks.md).

**The Avro limits** (below): a corrupt Avro value must not run the JVM out of heap.

**The class archive** (the JVM's Class Data Sharing). Every run is a new JVM (a spark-submit per task), and before it
reads a record it loads, parses and verifies some twenty thousand classes of Spark, Delta Lake, Hadoop and their
libraries, then runs them in the interpreter while the JIT compilers catch up. Set-up writes the classes a small
replay loads into an archive beside the jars (``cdcreplay_lab.class_archive``); a driver started with it maps them
ready-made. A JVM that cannot use the archive (another JDK, other jars on the class path, the file gone) starts
without it, as before, and says nothing: the options silence the JVM's warning. Only drivers started on this machine
use it: a cluster's executors and a driver in cluster deploy mode run elsewhere, where the file is not.
"""

from __future__ import annotations

from pathlib import Path

# Java's Avro reader allocates what a string, bytes or an array claims to hold before it reads it: a corrupt value that
# claims two gigabytes (``from_avro`` of a truncated DTS record) ran the JVM out of heap and ended the run. With these
# limits such a value fails to read: ``from_avro`` returns no record (PERMISSIVE) and the Python decoder quarantines
# it with its reason. A real value beyond them is read by the Python decoder too.
AVRO_LIMITS = {
    "org.apache.avro.limits.bytes.maxLength": 64 * 1024 * 1024,
    "org.apache.avro.limits.string.maxLength": 64 * 1024 * 1024,
    "org.apache.avro.limits.collectionItems.maxLength": 1_000_000,
}
JVM_OPTIONS = " ".join(("-XX:+UseParallelGC", *(f"-D{name}={limit}" for name, limit in AVRO_LIMITS.items())))
CLASS_ARCHIVE_FILE = "driver-classes.jsa"


def class_archive(jars_folder: Path) -> Path:
    """Where set-up writes the drivers' class archive: beside the pinned jars (``cdcreplay.jars.jars_dir()``) its
    classes come from."""
    return Path(jars_folder) / CLASS_ARCHIVE_FILE


def driver_java_options(jars_folder: Path) -> str:
    """The options of a driver JVM started here: the collector, and the class archive when set-up wrote one into
    ``jars_folder``."""
    archive = class_archive(jars_folder)
    return with_archive("SharedArchiveFile", archive) if archive.is_file() else JVM_OPTIONS


def with_archive(flag: str, archive: Path) -> str:
    """The collector and ``-XX:<flag>=<archive>`` (``SharedArchiveFile`` to use one, ``ArchiveClassesAtExit`` to
    write one), with the JVM's messages about the archive silenced."""
    option = f"-XX:{flag}={archive}"
    if any(character.isspace() for character in option):  # Spark splits the options at blanks, not in quotes
        option = f'"{option}"'
    return f"{JVM_OPTIONS} {option} -Xlog:cds=off -Xlog:cds+dynamic=off"
