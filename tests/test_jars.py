"""The pinned Spark jars: fetched from a Maven repository only with their pinned SHA-1, once, never half-written.

A real HTTP server on 127.0.0.1 stands in for Maven Central (the tests reach no network)."""

from __future__ import annotations

import hashlib
import http.server
import threading
from functools import partial

import pytest

from cdcreplay import jars

BODY = b"PK\x03\x04 not really a jar, but bytes with a known checksum"
JAR = jars.MavenJar("org.example", "demo_2.13", "1.0.0", hashlib.sha1(BODY).hexdigest())


@pytest.fixture
def repository(tmp_path):
    """A Maven layout served over HTTP; yields (base URL, list of the paths requested)."""
    root = tmp_path / "repo"
    folder = root / "org" / "example" / "demo_2.13" / "1.0.0"
    folder.mkdir(parents=True)
    (folder / JAR.file_name).write_bytes(BODY)
    requested = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):
            requested.append(self.path)
            super().do_GET()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", requested
    server.shutdown()


@pytest.fixture
def jars_dir(tmp_path, monkeypatch):
    target = tmp_path / "jars"
    monkeypatch.setenv(jars.JARS_DIR_VARIABLE, str(target))
    return target


def test_a_jar_is_fetched_once_with_its_checksum(repository, jars_dir):
    base, requested = repository
    assert jars.fetch(JAR, base) == jars_dir / JAR.file_name
    assert (jars_dir / JAR.file_name).read_bytes() == BODY
    assert jars.fetch(JAR, base) == jars_dir / JAR.file_name
    assert requested == ["/org/example/demo_2.13/1.0.0/demo_2.13-1.0.0.jar"]  # in place: not fetched again


def test_a_jar_with_another_checksum_is_refused_and_nothing_is_left(repository, jars_dir):
    base, _ = repository
    other = jars.MavenJar(JAR.group, JAR.artifact, JAR.version, "0" * 40)
    with pytest.raises(RuntimeError) as raised:
        jars.fetch(other, base)
    assert str(raised.value) == (f"{other.url(base)}: SHA-1 {JAR.sha1}, pinned {'0' * 40}; not installed")
    assert list(jars_dir.iterdir()) == []
    assert jars.installed_jars() == []


def test_a_jar_the_repository_lacks_fails_set_up_with_its_url(repository, jars_dir, capsys):
    base, _ = repository
    missing = jars.MavenJar(JAR.group, "absent_2.13", JAR.version, JAR.sha1)
    assert jars.main((missing,), base) == 1
    assert f"jars: cannot fetch {missing.url(base)}: HTTP Error 404" in capsys.readouterr().err


def test_the_pinned_spark_avro_is_spark_s_own_release():
    import pyspark

    assert jars.SPARK_AVRO.version == pyspark.__version__
    assert jars.SPARK_AVRO.url() == (
        "https://repo1.maven.org/maven2/org/apache/spark/spark-avro_2.13/4.2.0/spark-avro_2.13-4.2.0.jar"
    )
