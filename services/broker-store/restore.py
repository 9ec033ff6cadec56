"""Restore a backup into a store a broker starts from: `python -m quiver_broker.restore`.

    python -m quiver_broker.restore --from BACKUP --data-dir DIR [--broker-name NAME] [--metadata-url URL]
    python -m quiver_broker.restore --from s3://BUCKET/PREFIX [--s3-endpoint URL] [--s3-credentials-file F] ...

Offline and local (no broker runs on the target): the backup's files (backup.py) are copied
into `DIR/<name>.restoring`, checked against the manifest's lengths, the metadata (topics,
groups, consumer offsets as snapshotted, the ACL) is written through `Metadata` into SQLite in
it (or the database at --metadata-url, under the broker's rows), and the directory is renamed
to `DIR/<name>`, the store of a broker started with `--data-dir DIR --broker-name <name>`.
Files are copied, never linked: the broker appends to the active segment and queue files, and
the backup must stay as it was. From an object store (backup_s3.py) every object the manifest
lists is downloaded into that work directory and checked (size, SHA-256) before anything else
happens; credentials as the tiered store takes them (AWS_* variables, or an INI file). That
broker's first start is a recovery from the backup's
checkpoint: it checks the records by CRC and re-indexes those after the last full index file.

Prints a JSON summary; exit 0 done, 2 the input is wrong (no backup there, the target not
empty, a bad name, an object that fails its check), 65 a format this release cannot read
(data_format.EXIT_FORMAT), 1 the object store failed.
Owns the way back only; the backup's layout is backup.py's.
"""

import argparse
import json
import logging
import os
import shutil
import sys

from quiver.errors import QuiverError
from quiver.wire import names

from . import backup_s3, data_format
from .acl import AclStore
from .backup import BACKUP_FORMAT, MANIFEST, METADATA
from .metadata import Metadata, owner

log = logging.getLogger(__name__)

EXIT_USAGE = 2


class RestoreError(Exception):
    """The backup or the target is not usable; the message says what to do."""


def read_manifest(src: str) -> dict:
    try:
        with open(os.path.join(src, MANIFEST), "rb") as f:
            manifest = json.loads(f.read())
    except FileNotFoundError:
        raise RestoreError(f"{src} holds no {MANIFEST}: not a finished backup (a backup cut short is left as "
                           f".<name>.partial; take it again)") from None
    except ValueError as exc:
        raise RestoreError(f"{src}/{MANIFEST} is not readable JSON ({exc}): the backup is damaged") from None
    return check_manifest(src, manifest)


def check_manifest(src: str, manifest) -> dict:
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise RestoreError(f"{src}/{MANIFEST} lists no files: the backup is damaged")
    if manifest.get("backup_format", 0) > BACKUP_FORMAT:
        raise RestoreError(f"{src} is backup format {manifest['backup_format']} (quiver {manifest.get('quiver')}); "
                           f"this release reads format {BACKUP_FORMAT}: restore it with that release")
    return manifest


def restore(src: str, data_dir: str, broker_name: str | None = None, metadata_url: str = "",
            s3: tuple = ("", "")) -> dict:
    """Build `data_dir/<name>` from the backup at `src`, a directory or s3://BUCKET/PREFIX with
    `s3` (endpoint, credentials file) (module docstring); returns a summary."""
    objects = None
    if src.startswith("s3://"):
        try:
            objects = backup_s3.open_objects(src, *s3)
            manifest = check_manifest(src, backup_s3.read_manifest(objects))
        except (LookupError, ValueError) as exc:
            raise RestoreError(str(exc)) from None
    else:
        src = os.path.abspath(src)
        manifest = read_manifest(src)
    fmt = manifest.get("format") or {}
    if fmt.get("oldest_reader", 1) > data_format.CURRENT:
        raise data_format.FormatError(
            f"backup {src} holds store format {fmt['format']} (quiver {fmt.get('written_by')}); this release "
            f"(format {data_format.CURRENT}) cannot read it: restore it with a release that reads format {fmt['format']}")
    name = broker_name or manifest.get("broker") or ""
    problem = names.broker_name_problem(name)
    if problem:
        raise RestoreError(f"{problem}: give --broker-name")
    os.makedirs(data_dir, exist_ok=True)
    target = names.confine(data_dir, name)
    if os.path.isdir(target) and os.listdir(target) or os.path.lexists(target) and not os.path.isdir(target):
        raise RestoreError(f"{target} is not empty: restore into a new --data-dir (or move that store away)")
    work = names.confine(data_dir, f".{name}.restoring")
    shutil.rmtree(work, ignore_errors=True)   # an earlier restore cut short
    os.makedirs(work)
    try:
        snapshot = _fill(src, objects, manifest, work)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)   # nothing half-checked is left to start from
        raise
    counts = _metadata(snapshot, metadata_url or f"sqlite:///{os.path.join(work, 'metadata.db')}", name)
    if os.path.isdir(target):
        os.rmdir(target)
    os.rename(work, target)
    return {"store": target, "broker": name, "cut_offset": manifest.get("cut_offset"),
            "files": len(manifest["files"]), "taken_ms": manifest.get("taken_ms"), **counts}


def _fill(src: str, objects, manifest: dict, work: str) -> dict:
    """The backup's files into `work`, checked; returns its metadata snapshot."""
    if objects is not None:
        try:
            backup_s3.download(objects, manifest, work)
        except ValueError as exc:
            raise RestoreError(str(exc)) from None
        missing = {*manifest["files"], "checkpoint", data_format.FILE, METADATA} - set(manifest["objects"])
        if missing:
            raise RestoreError(f"{src}/{MANIFEST} lists no object for {sorted(missing)[:3]}: the backup is damaged")
    else:
        for rel, length in manifest["files"].items():
            _copy_checked(src, work, rel, length)
        for rel in ("checkpoint", data_format.FILE, METADATA):
            shutil.copyfile(os.path.join(src, rel), names.confine(work, rel))
    meta_path = os.path.join(work, METADATA)
    with open(meta_path, "rb") as f:
        snapshot = json.loads(f.read())
    os.unlink(meta_path)   # it goes into the metadata database
    return snapshot


def _copy_checked(src: str, work: str, rel: str, length) -> None:
    try:
        origin, dest = names.confine(src, rel), names.confine(work, rel)
    except QuiverError as exc:
        raise RestoreError(f"the manifest names {rel!r}: {exc.remark}; the backup is damaged") from None
    try:
        size = os.path.getsize(origin)
    except FileNotFoundError:
        raise RestoreError(f"{origin} is missing: the backup is damaged") from None
    if size != length:
        raise RestoreError(f"{origin} holds {size} bytes, the manifest says {length}: the backup is damaged")
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    shutil.copyfile(origin, dest)


def _metadata(snapshot: dict, url: str, name: str) -> dict:
    meta = Metadata(url, broker=owner(name, 0))
    try:
        for topic, conf in snapshot.get("topics", {}).items():
            meta.put_topic(topic, conf["read"], conf["write"], conf["perm"], conf.get("sysflag", 0),
                           conf.get("order", False))
        for group, conf in snapshot.get("groups", {}).items():
            meta.put_group(group, conf.get("retry_max_times", 16))
        for group, topic, qid, offset in snapshot.get("offsets", []):
            meta.set_offset(group, topic, qid, offset)
        acl = snapshot.get("acl")
        if acl and (acl.get("users") or acl.get("rules")):
            AclStore(meta.engine).replace(acl)
        return {"topics": len(meta.topics), "groups": len(meta.groups), "offsets": len(meta.offsets)}
    finally:
        meta.close()   # writes the offsets


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m quiver_broker.restore", description=__doc__.split("\n")[0])
    ap.add_argument("--from", dest="src", required=True, help="the backup directory, or s3://BUCKET/PREFIX")
    ap.add_argument("--data-dir", required=True, help="the data dir of the broker that will start from it")
    ap.add_argument("--broker-name", default=None, help="default: the name of the broker that was backed up")
    ap.add_argument("--metadata-url", default="", help="SQLAlchemy URL of the metadata database (default: SQLite "
                                                         "in the restored store)")
    ap.add_argument("--s3-endpoint", default="", help="with s3://: the S3-compatible endpoint URL (default: AWS)")
    ap.add_argument("--s3-credentials-file", default="", help="with s3://: an AWS-style INI file (default: the "
                                                              "AWS_* environment variables)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        summary = restore(args.src, args.data_dir, args.broker_name, args.metadata_url,
                          (args.s3_endpoint, args.s3_credentials_file))
    except data_format.FormatError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return data_format.EXIT_FORMAT
    except (RestoreError, QuiverError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_USAGE
    except backup_s3.StoreDown as exc:
        sys.stderr.write(f"error: the object store failed: {exc} (nothing was restored; try again)\n")
        return 1
    sys.stdout.write(json.dumps(summary) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
