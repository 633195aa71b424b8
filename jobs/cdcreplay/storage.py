"""Files and folders on the local disk or on S3, addressed the way Spark addresses them.

Spark and Delta read and write the data (Parquet, Delta tables) through Hadoop's file systems; this module is for
what Python itself reads and writes beside them: the pointer, the lock, the pattern files, run summaries, manifests,
reports and data docs, the archive's listing and its Parquet footers. A :class:`Location` is one such file or folder.

- A local path (or ``file://`` URI) is read and written with the standard library; a whole file is replaced in one
  step (temporary file, fsync, rename), so a reader never sees half of it.
- ``s3a://bucket/key`` (``s3://`` is the same store) goes through pyarrow's S3 client, configured from the
  environment as every AWS tool is: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` (and ``AWS_SESSION_TOKEN``),
  ``AWS_REGION``, and ``AWS_ENDPOINT_URL`` for an S3-compatible server (MinIO, Ceph, s3proxy: path-style requests).
  :func:`s3a_settings` gives Spark's S3A client the same endpoint. A PUT replaces an object in one step.
- A file created only if absent (:meth:`Location.create_exclusive`, the pipeline's lock) is ``O_EXCL`` on a local
  disk and a conditional PUT (``If-None-Match: *``) on S3, sent by Hadoop's S3A client of the running Spark session:
  of two writers, S3 accepts exactly one.

Other Hadoop schemes (``hdfs://``, ``gs://``, ``abfs://``) are refused with a clear error: Spark could write there,
but the pointer and lock need a client this module does not have yet.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

S3_SCHEMES = ("s3a", "s3")
SUPPORTED = "a local path, file:// or s3a://bucket/prefix"


class StorageError(ValueError):
    """A path this module cannot address; the message names it and what is supported."""


def unsupported_scheme(uri: str) -> str | None:
    """Why ``uri`` cannot be a warehouse or archive path, or None when it can."""
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    if scheme in ("", "file", *S3_SCHEMES):
        if scheme in S3_SCHEMES and not uri.split("://", 1)[1].split("/", 1)[0]:
            return f"{uri!r} names no bucket; write s3a://<bucket>/<prefix>"
        return None
    return f"{uri!r}: the {scheme}:// scheme is not supported; use {SUPPORTED}"


def endpoint_url() -> str | None:
    """The S3-compatible server to talk to instead of AWS (``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``)."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def s3a_settings() -> dict[str, str]:
    """Hadoop settings that point Spark's S3A client where :class:`Location` points pyarrow's: the endpoint from
    the environment (path-style requests, as S3-compatible servers want them), the region and the credentials.

    The credentials are copied because the JVM may have started before they were set (a notebook, the tests'
    session), and because the executors get them this way: Spark ships the driver's Hadoop configuration with every
    file task, so executors need no credentials of their own. S3A's default provider chain reads them
    (with the session token, as temporary credentials).
    """
    settings = {}
    endpoint = endpoint_url()
    if endpoint:
        settings["fs.s3a.endpoint"] = endpoint
        settings["fs.s3a.path.style.access"] = "true"
        settings["fs.s3a.connection.ssl.enabled"] = str(endpoint.startswith("https://")).lower()
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        settings["fs.s3a.endpoint.region"] = region
    for variable, key in (
        ("AWS_ACCESS_KEY_ID", "fs.s3a.access.key"),
        ("AWS_SECRET_ACCESS_KEY", "fs.s3a.secret.key"),
        ("AWS_SESSION_TOKEN", "fs.s3a.session.token"),
    ):
        if os.environ.get(variable):
            settings[key] = os.environ[variable]
    return settings


def delta_rs_options() -> dict[str, str]:
    """What delta-rs (the ``deltalake`` package) needs beside the environment to reach the same server."""
    endpoint = endpoint_url()
    if not endpoint:
        return {}
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ALLOW_HTTP": str(endpoint.startswith("http://")).lower(),
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
        "AWS_REGION": os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
    }


@lru_cache(maxsize=4)
def _s3(endpoint: str | None, region: str | None):
    from pyarrow import fs

    options = {"region": region} if region else {}
    if endpoint:
        scheme, _, host = endpoint.partition("://")
        options.update(endpoint_override=host.rstrip("/"), scheme=scheme)
    return fs.S3FileSystem(**options)


def _s3_filesystem():
    return _s3(endpoint_url(), os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"))


class Location:
    """A file or folder: ``str()`` gives the path or URI Spark reads, ``/`` a child, as with ``pathlib.Path``."""

    def __init__(self, uri: str | os.PathLike | Location):
        text = str(uri) if isinstance(uri, Location) else os.fspath(uri)
        problem = unsupported_scheme(text)
        if problem:
            raise StorageError(problem)
        if text.startswith("file://"):
            text = text.removeprefix("file://")
        self._uri = text.rstrip("/") if "://" in text else text

    # -- addressing ---------------------------------------------------------------------------------------------------
    @property
    def is_local(self) -> bool:
        return "://" not in self._uri

    @property
    def _key(self) -> str:
        """The path pyarrow's S3 file system takes: ``bucket/key``."""
        return self._uri.split("://", 1)[1]

    def __str__(self) -> str:
        return self._uri

    def __fspath__(self) -> str:
        if not self.is_local:
            raise StorageError(f"{self._uri} is not a local file; read it through cdcreplay.storage")
        return self._uri

    def __repr__(self) -> str:
        return f"Location({self._uri!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Location) and other._uri == self._uri

    def __hash__(self) -> int:
        return hash(self._uri)

    def __truediv__(self, relative: str) -> Location:
        return Location(os.path.join(self._uri, relative) if self.is_local else f"{self._uri}/{relative}")

    @property
    def name(self) -> str:
        return self._uri.rstrip("/").rsplit("/", 1)[-1]

    @property
    def parent(self) -> Location:
        if self.is_local:
            return Location(os.path.dirname(self._uri) or ".")
        return Location(self._uri.rsplit("/", 1)[0])

    def relative_to(self, base: Location) -> str:
        prefix = str(base).rstrip("/") + "/"
        if not self._uri.startswith(prefix):
            raise ValueError(f"{self} is not under {base}")
        return self._uri[len(prefix) :]

    # -- reading ------------------------------------------------------------------------------------------------------
    def read_bytes(self) -> bytes:
        """The file's bytes; FileNotFoundError when it does not exist."""
        if self.is_local:
            return Path(self._uri).read_bytes()
        with _s3_filesystem().open_input_stream(self._key) as stream:
            return stream.read()

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    def _info(self):
        return _s3_filesystem().get_file_info(self._key)

    def exists(self) -> bool:
        if self.is_local:
            return os.path.exists(self._uri)
        from pyarrow.fs import FileType

        return self._info().type != FileType.NotFound

    def is_dir(self) -> bool:
        if self.is_local:
            return os.path.isdir(self._uri)
        from pyarrow.fs import FileType

        return self._info().type == FileType.Directory

    def is_file(self) -> bool:
        if self.is_local:
            return os.path.isfile(self._uri)
        from pyarrow.fs import FileType

        return self._info().type == FileType.File

    def modified_at(self) -> float:
        """Seconds since the epoch the file was last written."""
        if self.is_local:
            return os.stat(self._uri).st_mtime
        return self._info().mtime.timestamp()

    def iterdir(self) -> list[Location]:
        """The folder's direct children (files and folders); none when it does not exist."""
        if self.is_local:
            return [self / name for name in sorted(os.listdir(self._uri))] if self.is_dir() else []
        from pyarrow.fs import FileSelector

        infos = _s3_filesystem().get_file_info(FileSelector(self._key, allow_not_found=True))
        return [
            Location(f"{self._uri.split('://', 1)[0]}://{info.path}") for info in sorted(infos, key=lambda i: i.path)
        ]

    def files(self) -> list[tuple[Location, str]]:
        """Every file below this folder, with its path relative to it, sorted."""
        if self.is_local:
            root = Path(self._uri)
            found = [(Location(str(p)), p.relative_to(root).as_posix()) for p in root.rglob("*") if p.is_file()]
            return sorted(found, key=lambda pair: pair[1])
        from pyarrow.fs import FileSelector, FileType

        scheme = self._uri.split("://", 1)[0]
        infos = _s3_filesystem().get_file_info(FileSelector(self._key, recursive=True, allow_not_found=True))
        prefix = self._key.rstrip("/") + "/"
        found = [
            (Location(f"{scheme}://{info.path}"), info.path[len(prefix) :])
            for info in infos
            if info.type == FileType.File
        ]
        return sorted(found, key=lambda pair: pair[1])

    def arrow_filesystem(self):
        """(pyarrow file system, path in it): for pyarrow readers that take both (``pyarrow.dataset``)."""
        if self.is_local:
            from pyarrow.fs import LocalFileSystem

            return LocalFileSystem(), self._uri
        return _s3_filesystem(), self._key

    def open_input_file(self):
        """A random-access file pyarrow's readers take (a Parquet footer is read from the end)."""
        if self.is_local:
            from pyarrow import OSFile

            return OSFile(self._uri)
        return _s3_filesystem().open_input_file(self._key)

    # -- writing ------------------------------------------------------------------------------------------------------
    def write_bytes(self, data: bytes) -> None:
        """Replace the file in one step: a reader sees the old bytes or the new ones, never a part."""
        if not self.is_local:
            with _s3_filesystem().open_output_stream(self._key) as stream:
                stream.write(data)
            return
        folder = os.path.dirname(self._uri) or "."
        os.makedirs(folder, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{self.name}.", dir=folder)
        try:
            with os.fdopen(handle, "wb") as stream:
                stream.write(data)
                stream.flush()
                os.fsync(stream.fileno())
            os.replace(temporary, self._uri)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def write_text(self, text: str, encoding: str = "utf-8") -> None:
        self.write_bytes(text.encode(encoding))

    def create_exclusive(self, text: str) -> bool:
        """Create the file with ``text`` unless it exists; False when it does (another writer was first)."""
        if self.is_local:
            os.makedirs(os.path.dirname(self._uri) or ".", exist_ok=True)
            try:
                handle = os.open(self._uri, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                stream.write(text)
            return True
        return _conditional_put(self._uri.replace("s3://", "s3a://", 1), text.encode("utf-8"))

    def mkdir(self) -> None:
        """Make the folder (an object store has no folders: nothing to do there)."""
        if self.is_local:
            os.makedirs(self._uri, exist_ok=True)

    def unlink(self) -> None:
        """Remove the file if it exists."""
        if self.is_local:
            Path(self._uri).unlink(missing_ok=True)
        elif self.is_file():
            _s3_filesystem().delete_file(self._key)

    def remove_tree(self) -> None:
        """Remove the folder and everything below it, if it exists."""
        if self.is_local:
            shutil.rmtree(self._uri, ignore_errors=True)
        elif self.is_dir():
            _s3_filesystem().delete_dir(self._key)

    def upload_tree(self, local_folder: str | os.PathLike) -> None:
        """Copy a local folder's files below this one (replacing files of the same name)."""
        for path in sorted(Path(local_folder).rglob("*")):
            if path.is_file():
                (self / path.relative_to(local_folder).as_posix()).write_bytes(path.read_bytes())


@contextmanager
def local_folder(location: Location) -> Iterator[Path]:
    """A local folder for a writer that only writes local files (GX's Data Docs): ``location`` itself when it is
    local, else a temporary folder whose files are uploaded to ``location`` when the body ends without an error."""
    if location.is_local:
        os.makedirs(str(location), exist_ok=True)
        yield Path(str(location))
        return
    with tempfile.TemporaryDirectory(prefix="cdcreplay-upload-") as folder:
        yield Path(folder)
        location.upload_tree(folder)


def _conditional_put(uri: str, data: bytes) -> bool:
    """PUT ``data`` at ``uri`` with ``If-None-Match: *`` through the running Spark session's S3A client (Hadoop
    3.4.2+ sends it for a create that must not overwrite); False when the object exists."""
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    if spark is None:
        raise StorageError(f"creating {uri} only if absent needs a running Spark session (its S3A client)")
    jvm = spark._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    filesystem = path.getFileSystem(spark._jsc.hadoopConfiguration())
    if filesystem.exists(path):
        return False
    stream = filesystem.createFile(path).overwrite(False).must("fs.option.create.conditional.overwrite", True).build()
    stream.write(bytearray(data))
    try:
        stream.close()  # the PUT happens here; S3 answers 412 when another writer created the object first
    except Exception as error:  # py4j wraps the JVM's exception
        if "RemoteFileChangedException" in str(error) or "412" in str(error) or "FileAlreadyExists" in str(error):
            return False
        raise
    return True
