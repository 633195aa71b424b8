"""A real S3 server on 127.0.0.1 for the tests: s3proxy (Maven Central, org.gaul:s3proxy, pinned in cdcreplay.jars and
fetched by scripts/test.sh), serving buckets from a local folder.

Why s3proxy: it is one jar the JVM the tests already need runs, it starts in about a second, and it implements what
the product relies on -- path-style requests, SigV4, multipart uploads, ranged reads, and conditional PUTs
(``If-None-Match: *`` answered with 412) that the pipeline lock uses. SeaweedFS (Go module proxy) works too, but
builds for minutes and starts five servers.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from cdcreplay.jars import S3PROXY, jar_path

ACCESS_KEY = "cdcreplay-test"
SECRET_KEY = "cdcreplay-test-secret"
REGION = "us-east-1"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_until_listening(url: str, server: subprocess.Popen, log: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"s3proxy exited with {server.returncode}: {log.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except urllib.error.HTTPError:
            return  # it answers (403 to an anonymous request): it listens
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"s3proxy did not answer at {url} within {timeout_s} s: {log.read_text()[-2000:]}")


@contextmanager
def running_s3proxy(folder: Path, buckets: tuple[str, ...] = ("lake",)):
    """Start s3proxy on a free port with ``buckets`` (created through the S3 API); yield its endpoint URL."""
    jar = jar_path(S3PROXY)
    if not jar.is_file():
        raise RuntimeError(f"{jar} is missing: run `python -m cdcreplay.jars --test-servers` (scripts/test.sh does)")
    port = _free_port()
    data = folder / "data"
    data.mkdir(parents=True)
    properties = folder / "s3proxy.conf"
    properties.write_text(
        f"s3proxy.endpoint=http://127.0.0.1:{port}\n"
        "s3proxy.authorization=aws-v2-or-v4\n"
        f"s3proxy.identity={ACCESS_KEY}\n"
        f"s3proxy.credential={SECRET_KEY}\n"
        "jclouds.provider=filesystem-nio2\n"
        f"jclouds.filesystem.basedir={data}\n"
    )
    log = folder / "s3proxy.log"
    with log.open("w") as output:
        server = subprocess.Popen(
            ["java", "-Xmx256m", "-jar", str(jar), "--properties", str(properties)],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        _wait_until_listening(endpoint + "/", server, log)
        from pyarrow import fs

        client = fs.S3FileSystem(
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            region=REGION,
            endpoint_override=f"127.0.0.1:{port}",
            scheme="http",
            allow_bucket_creation=True,
        )
        for bucket in buckets:
            client.create_dir(bucket)
        yield endpoint
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def s3_environment(endpoint: str) -> dict[str, str]:
    """The environment a run reads its S3 settings from (``cdcreplay.storage``), for this server."""
    return {
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_REGION": REGION,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def environment_with(settings: dict[str, str]) -> dict[str, str]:
    return {**os.environ, **settings}
