"""Backups in an object store: a finished snapshot uploaded under s3://BUCKET/PREFIX, and fetched
back, every object checked, by the restorer.

Owns the object layout of an uploaded backup and its checks; the snapshot itself is backup.py's,
the S3 client (endpoint, credentials as the tiered store takes them, timeouts, errors)
tiered_store's, reused here for other keys::

    PREFIX/<rel>          each file of the backup directory (backup.py's layout), as written there
    PREFIX/BACKUP.json    its manifest plus "objects": {rel: [size, sha256]} of every other object;
                          uploaded last, so a prefix without it is an upload cut short, never a backup

Each object is verified once put (HEAD: size and the ETag, the MD5 of a single PUT); the
restorer checks size and SHA-256 of each one as it downloads it, before the data dir is renamed
into place. Both move PARALLEL objects at a time: a backup is many small files (ConsumeQueue and
index files), so the store's latency per request, not bandwidth, sets the pace.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor

from quiver.wire import names

from .tiered_store import S3Store, StoreDown, parse_url

MANIFEST = "BACKUP.json"
CHUNK = 1 << 20
PARALLEL = 4   # objects in flight (botocore's client pools 10 connections)
_PART_RE = re.compile(r"[A-Za-z0-9%_.-]+")   # topics' names (%RETRY%...), 20-digit files, queue ids


class BackupExists(Exception):
    """The prefix holds a finished backup already."""


def key_problem(rel) -> str | None:
    if type(rel) is not str or not 0 < len(rel) <= 1024:
        return "an object name must be a string of 1..1024 characters"
    for part in rel.split("/"):
        if part in (".", "..") or not _PART_RE.fullmatch(part):
            return f"object name {names.shown(rel)} is not a relative path of the backup's layout"
    return None


class BackupObjects(S3Store):
    """tiered_store's S3 client for the keys of one backup (any relative path of its layout)."""

    def _key(self, key: str) -> str:
        problem = key_problem(key)
        if problem:
            raise ValueError(problem)
        return f"{self.prefix}/{key}"

    def get_file(self, key: str, path: str) -> tuple[int, str]:
        """Download the object into a new file at `path`; its (size, sha256 hex)."""
        r = self._call(self.client.get_object, Key=self._key(key))
        h, size = hashlib.sha256(), 0
        try:
            with open(path, "xb") as out:
                for buf in r["Body"].iter_chunks(CHUNK):
                    h.update(buf)
                    out.write(buf)
                    size += len(buf)
                out.flush()
                os.fsync(out.fileno())
        except OSError:
            raise   # the local disk
        except Exception as exc:   # the connection cut mid-body (botocore, urllib3)
            raise StoreDown(f"{self.url}: {exc}") from exc
        return size, h.hexdigest()


def check_url(url: str) -> tuple[str, str]:
    """(bucket, prefix); ValueError saying what to fix unless `url` is s3://BUCKET/PREFIX."""
    kind, bucket, prefix = parse_url(url)
    if kind != "s3" or not prefix:
        raise ValueError(f"backup target {url!r}: use s3://BUCKET/PREFIX (the prefix holds that backup only)")
    return bucket, prefix


def open_objects(url: str, endpoint: str = "", credentials_file: str = "") -> BackupObjects:
    return BackupObjects(*check_url(url), endpoint, credentials_file)


def _sums(path: str) -> tuple[int, str, str]:
    md5, sha = hashlib.md5(usedforsecurity=False), hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while buf := f.read(CHUNK):
            md5.update(buf)
            sha.update(buf)
            size += len(buf)
    return size, md5.hexdigest(), sha.hexdigest()


def upload(src_dir: str, manifest: dict, objects: BackupObjects) -> int:
    """Put every file of the finished backup directory `src_dir` (its manifest `manifest`), then the
    manifest with their sizes and SHA-256; returns the bytes uploaded. BackupExists if the prefix
    holds a backup; StoreDown if the store fails (the prefix is then left without a manifest)."""
    if objects.head(MANIFEST) is not None:
        raise BackupExists(f"{objects.url} holds a backup already ({MANIFEST}): give a new prefix")

    def put(rel: str) -> list:
        path = names.confine(src_dir, *rel.split("/"))
        size, md5, sha = _sums(path)
        objects.put_file(rel, path, size)
        got = objects.head(rel)
        if got is None or got[0] != size or "-" not in got[1] and got[1] != md5:
            raise StoreDown(f"{objects.url}/{rel}: the store holds {got} after the put, not ({size}, {md5})")
        return [size, sha]
    rels = sorted({*manifest["files"], "checkpoint", "FORMAT", "metadata.json"})
    with ThreadPoolExecutor(PARALLEL, thread_name_prefix="backup-put") as pool:
        listed = dict(zip(rels, pool.map(put, rels)))
    objects.put_bytes(MANIFEST, json.dumps({**manifest, "objects": listed}, sort_keys=True).encode())
    return sum(size for size, _ in listed.values())


def read_manifest(objects: BackupObjects) -> dict:
    """The backup's manifest, as the store holds it; LookupError if there is none, ValueError if unreadable."""
    found = objects.head(MANIFEST)
    if found is None:
        raise LookupError(f"{objects.url} holds no {MANIFEST}: not a finished backup (an upload cut short "
                          f"leaves objects without it; take the backup again)")
    manifest = json.loads(objects.get_range(MANIFEST, 0, found[0]))
    listed = manifest.get("objects") if isinstance(manifest, dict) else None
    if not isinstance(listed, dict) or not all(
            isinstance(v, list) and len(v) == 2 and isinstance(v[0], int) and isinstance(v[1], str)
            for v in listed.values()):
        raise ValueError(f"{objects.url}/{MANIFEST} lists no objects with sizes and checksums")
    return manifest


def download(objects: BackupObjects, manifest: dict, work: str) -> int:
    """Every object the manifest lists into `work`, each checked (size, SHA-256); ValueError naming
    the first that does not match. Returns the bytes downloaded."""
    listed = sorted(manifest["objects"].items())
    for rel, _ in listed:
        problem = key_problem(rel)
        if problem:
            raise ValueError(f"the manifest names {rel!r}: {problem}")
        os.makedirs(os.path.dirname(names.confine(work, *rel.split("/"))), exist_ok=True)

    def get(item) -> int:
        rel, (size, sha) = item
        try:
            got = objects.get_file(rel, names.confine(work, *rel.split("/")))
        except FileNotFoundError:
            raise ValueError(f"{objects.url}/{rel} is missing: the backup is damaged") from None
        if got != (size, sha):
            raise ValueError(f"{objects.url}/{rel} holds {got[0]} bytes with SHA-256 {got[1]}, the manifest says "
                             f"{size} bytes, {sha}: the backup is damaged")
        return size
    with ThreadPoolExecutor(PARALLEL, thread_name_prefix="restore-get") as pool:
        return sum(pool.map(get, listed))
