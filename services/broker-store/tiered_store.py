"""Object stores a broker's tiered CommitLog segments go to: S3 (boto3) or a directory.

Owns the store URL (`s3://BUCKET/PREFIX`, `file:///path`), its credentials and
the object calls the uploader and the remote reader make (put a file, head,
ranged get, delete). Not what is uploaded nor when (tiered.py).

Every key is checked here (KEY_RE) before it becomes an S3 key or a path; the
file store also confines it under its root. A store that fails raises
StoreDown (OSError, network, HTTP 5xx): callers back off and retry.
"""

from __future__ import annotations

import configparser
import hashlib
import os
import re
import shutil
import tempfile
import urllib.parse

from quiver.wire import names

KEY_RE = re.compile(r"^commitlog/[0-9]{20}(\.json)?$")
PREFIX_RE = re.compile(r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")
BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
IO_TIMEOUT_S = 10
CONNECT_TIMEOUT_S = 3   # reads wait for it on the broker's thread


class StoreDown(Exception):
    """The object store could not be reached or refused a call (retry later)."""


def check_key(key: str) -> str:
    if not isinstance(key, str) or not KEY_RE.match(key):
        raise ValueError(f"object key {names.shown(key)} is not commitlog/<20 digits>[.json]")
    return key


def file_md5(path: str, size: int | None = None) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        left = size if size is not None else -1
        while left:
            buf = f.read(1 << 20 if left < 0 else min(left, 1 << 20))
            if not buf:
                break
            h.update(buf)
            left -= len(buf) if left > 0 else 0
    return h.hexdigest()


def write_atomic(path: str, data: bytes) -> None:
    """Write a file whole or not at all (temp file, fsync, rename, directory fsync)."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dfd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class FileStore:
    """`file:///path`: objects are files under a directory (tests, an NFS mount)."""

    def __init__(self, root: str):
        self.root = os.path.realpath(root)
        self.url = f"file://{self.root}"
        os.makedirs(os.path.join(self.root, "commitlog"), exist_ok=True)

    def _path(self, key: str) -> str:
        return names.confine(self.root, *check_key(key).split("/"))

    def put_file(self, key: str, path: str, size: int) -> None:
        dst = self._path(key)
        try:
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dst), prefix=".up-")
            with os.fdopen(fd, "wb") as out, open(path, "rb") as src:
                shutil.copyfileobj(_Limited(src, size), out, 1 << 20)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, dst)
        except OSError as exc:
            raise StoreDown(f"{self.url}: {exc}") from exc

    def put_bytes(self, key: str, data: bytes) -> None:
        try:
            write_atomic(self._path(key), data)
        except OSError as exc:
            raise StoreDown(f"{self.url}: {exc}") from exc

    def head(self, key: str) -> tuple[int, str] | None:
        """(size, md5 hex) of the object, None when there is none."""
        path = self._path(key)
        try:
            return os.path.getsize(path), file_md5(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreDown(f"{self.url}: {exc}") from exc

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of the object (short at its end)."""
        try:
            with open(self._path(key), "rb") as f:
                f.seek(start)
                return f.read(end - start)
        except OSError as exc:
            raise StoreDown(f"{self.url}: {exc}") from exc

    def delete(self, key: str) -> None:
        try:
            os.unlink(self._path(key))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StoreDown(f"{self.url}: {exc}") from exc


class _Limited:
    """The first `size` bytes of a file object, seekable (boto3 rewinds a body to retry it)."""

    def __init__(self, f, size: int):
        self.f, self.size, self.pos = f, size, 0

    def read(self, n: int = -1) -> bytes:
        left = self.size - self.pos
        n = left if n is None or n < 0 else min(n, left)
        buf = self.f.read(n) if n > 0 else b""
        self.pos += len(buf)
        return buf

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.size}[whence]
        self.pos = max(0, min(self.size, base + offset))
        self.f.seek(self.pos)
        return self.pos


class S3Store:
    """`s3://BUCKET/PREFIX` through boto3; `endpoint` for an S3-compatible server (MinIO, moto ...)."""

    def __init__(self, bucket: str, prefix: str, endpoint: str = "", credentials_file: str = ""):
        import boto3
        from botocore.config import Config as BotoConfig

        self.bucket, self.prefix = bucket, prefix
        self.url = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
        kw: dict = {}
        if credentials_file:
            kw.update(_credentials(credentials_file))
        cfg = BotoConfig(connect_timeout=CONNECT_TIMEOUT_S, read_timeout=IO_TIMEOUT_S,
                         retries={"max_attempts": 2, "mode": "standard"})
        self.client = boto3.session.Session(**kw).client(
            "s3", endpoint_url=endpoint or None, config=cfg,
            region_name=os.environ.get("AWS_DEFAULT_REGION") or kw.get("region_name") or "us-east-1")

    def _key(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _call(self, fn, **kw):
        from botocore.exceptions import BotoCoreError, ClientError
        try:
            return fn(Bucket=self.bucket, **kw)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("404", "NoSuchKey", "NotFound"):
                raise FileNotFoundError(kw.get("Key")) from None
            raise StoreDown(f"{self.url}: {code or exc}") from exc
        except (BotoCoreError, OSError) as exc:
            raise StoreDown(f"{self.url}: {exc}") from exc

    def put_file(self, key: str, path: str, size: int) -> None:
        with open(path, "rb") as f:   # one PUT (a segment is at most 1 GiB + a few bytes < 5 GB)
            self._call(self.client.put_object, Key=self._key(key), Body=_Limited(f, size),
                       ContentLength=size)

    def put_bytes(self, key: str, data: bytes) -> None:
        self._call(self.client.put_object, Key=self._key(key), Body=data)

    def head(self, key: str) -> tuple[int, str] | None:
        try:
            r = self._call(self.client.head_object, Key=self._key(key))
        except FileNotFoundError:
            return None
        return r["ContentLength"], r.get("ETag", "").strip('"')

    def get_range(self, key: str, start: int, end: int) -> bytes:
        r = self._call(self.client.get_object, Key=self._key(key), Range=f"bytes={start}-{end - 1}")
        try:
            return r["Body"].read()
        except Exception as exc:
            raise StoreDown(f"{self.url}: {exc}") from exc

    def delete(self, key: str) -> None:
        try:
            self._call(self.client.delete_object, Key=self._key(key))
        except FileNotFoundError:
            pass


def _credentials(path: str) -> dict:
    """aws_access_key_id / aws_secret_access_key (and region) of an AWS-style INI file's
    [default] section (or its only one)."""
    cp = configparser.ConfigParser()
    if not cp.read(path):
        raise ValueError(f"s3 credentials file {path} cannot be read")
    section = "default" if cp.has_section("default") else (cp.sections() or [""])[0]
    if not section or not cp.has_option(section, "aws_access_key_id"):
        raise ValueError(f"s3 credentials file {path}: no [default] aws_access_key_id / aws_secret_access_key")
    out = {"aws_access_key_id": cp.get(section, "aws_access_key_id"),
           "aws_secret_access_key": cp.get(section, "aws_secret_access_key", fallback="")}
    if cp.has_option(section, "region"):
        out["region_name"] = cp.get(section, "region")
    return out


def parse_url(url: str) -> tuple[str, str, str]:
    """('s3', bucket, prefix) or ('file', path, ''); ValueError saying what to fix."""
    u = urllib.parse.urlsplit(url)
    if u.scheme == "file":
        if u.netloc not in ("", "localhost") or not u.path.startswith("/") or "\x00" in u.path:
            raise ValueError(f"tiered store {url!r}: use file:///absolute/path")
        return "file", u.path, ""
    if u.scheme == "s3":
        prefix = u.path.strip("/")
        if not BUCKET_RE.match(u.netloc or ""):
            raise ValueError(f"tiered store {url!r}: bucket must be 3-63 of a-z 0-9 . -")
        if prefix and (not PREFIX_RE.match(prefix) or ".." in prefix.split("/") or len(prefix) > 512):
            raise ValueError(f"tiered store {url!r}: prefix must be /-separated parts of A-Z a-z 0-9 . _ -")
        return "s3", u.netloc, prefix
    raise ValueError(f"tiered store {url!r}: use s3://BUCKET/PREFIX or file:///path")


def open_store(url: str, endpoint: str = "", credentials_file: str = ""):
    kind, where, prefix = parse_url(url)
    if kind == "file":
        return FileStore(where)
    return S3Store(where, prefix, endpoint, credentials_file)
