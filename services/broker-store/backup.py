"""Backups of a running broker (BROKER_BACKUP): a consistent snapshot, writes going on meanwhile.

Owns the snapshot procedure and the backup directory's layout; not the formats (each file is
taken as its owner wrote it) nor the way back (restore.py)::

    <--backup-dir>/<name>/
      BACKUP.json                  the manifest, written last (no manifest: not a backup)
      FORMAT                       the store's format (data_format.py)
      checkpoint                   where the restored broker's recovery starts (checkpoint.py)
      commitlog/<20 digits>        sealed segments hard-linked, the active one copied up to the cut
      consumequeue/<topic>/<q>/..  sealed files hard-linked, each queue's last file copied up to
                                   its length at the cut
      index/<name>                 full index files hard-linked; the one being written left out
      compaction/<topic>/<q>/..    compacted topics' logs, hard-linked (replaced whole, never in place)
      tiered/<20 digits>.json      with a tiered store: the record of each segment uploaded there
                                   (tiered.py), hard-linked; the remote objects stay where they are
      metadata.json                topics, groups, consumer offsets and the ACL at the cut

Consistency: the plan is made on the service thread, between two requests, where every
write of the store and of the offsets happens. The cut is the CommitLog's end of whole
puts then; every ConsumeQueue entry that exists then points below it (dispatch is inline in
the put), and topics, groups and offsets are copied from memory at that same moment. A file
that is never written again (a later one exists) is hard-linked there and then, so retention
may delete it meanwhile; a file still being appended is opened there and copied by a worker
thread up to its length at the cut: appends go past those bytes, and a failed put is rolled
back only past whole puts. Nothing waits for a flush: the copy reads what was written (the
page cache), and the backup's own files are fsynced before the manifest.

The index file being written is not taken: puts rewrite it in place (hash slots), so a copy
made while they go on could mix two moments. The checkpoint sends the restored broker's
recovery back to the end of the last full index file instead, and it re-indexes (and CRC
checks) the records after it at its first start.

Hard links need the backup root on the data dir's filesystem; where a link fails (another
filesystem, links refused) the file, already open, is copied too.

With a `url` (s3://BUCKET/PREFIX) the same directory is written as a staging copy under the
root, uploaded by the worker (backup_s3.py: the manifest last) and then deleted.
"""

import errno
import json
import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass, field

from quiver import __version__
from quiver.errors import InvalidParameterError, ServiceNotAvailableError, SystemBusyError
from quiver.wire import names
from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode, ResponseCode

from . import backup_s3, checkpoint, data_format

log = logging.getLogger(__name__)

MANIFEST = "BACKUP.json"
METADATA = "metadata.json"
BACKUP_FORMAT = 1   # of the backup directory itself (the manifest's "backup_format")
CHUNK = 1 << 20


@dataclass
class Part:
    """One file of the snapshot: hard-linked already (`fd` None), or to copy from `fd`."""
    rel: str          # path under the backup directory
    length: int
    fd: int | None = None


@dataclass
class Plan:
    """Everything taken on the service thread: what the worker then writes out."""
    dest: str
    parts: list[Part] = field(default_factory=list)
    manifest: dict = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)
    ckpt: checkpoint.Checkpoint | None = None
    linked: int = 0
    url: str = ""        # s3://BUCKET/PREFIX: uploaded there, the local copy then deleted
    endpoint: str = ""


class Backups:
    """BROKER_BACKUP; one at a time. `root`: the broker's --backup-dir ('' refuses every backup)."""

    def __init__(self, root: str, store, metadata, acl, identity: dict, reply_later, s3: tuple = ("", "")):
        self.root = root
        self.s3 = s3   # the broker's (--s3-endpoint, --s3-credentials-file): an upload's defaults
        self.store, self.metadata, self.acl = store, metadata, acl
        self.identity = identity   # broker name, cluster, broker id: what the manifest says it was
        self.reply_later = reply_later   # call_soon_threadsafe: the reply goes out on the service thread
        self.running: str | None = None

    def handlers(self) -> dict:
        return {RequestCode.BROKER_BACKUP: self.backup}

    def backup(self, req) -> None:
        if self.running is not None:
            raise SystemBusyError(f"a backup is being written to {self.running}: retry once it is done")
        plan = self.start(req.args.name, req.args.url, req.args.endpoint)
        self.running = plan.url or plan.dest
        threading.Thread(target=self._write, args=(plan, req), name="backup", daemon=True).start()

    def start(self, name: str, url: str | None = None, endpoint: str | None = None) -> Plan:
        """The plan of a backup named `name`; with `url`, staged flat under the root to be uploaded."""
        if url:
            try:
                backup_s3.check_url(url)
            except ValueError as exc:
                raise InvalidParameterError(str(exc)) from None
        plan = self.plan(self.destination(name.replace("/", "_") if url else name))
        plan.url, plan.endpoint = url or "", endpoint or self.s3[0]
        return plan

    def destination(self, name: str) -> str:
        if not self.root:
            raise ServiceNotAvailableError("this broker takes no backups: start it with --backup-dir DIR (a "
                                           "directory on its data dir's filesystem, so sealed files are hard-linked)")
        try:
            dest = names.confine(self.root, *name.split("/"))
        except names.UnsafePathError as exc:
            raise InvalidParameterError(f"backup name {name!r}: {exc.remark}") from None
        if os.path.lexists(dest) or os.path.lexists(_partial(dest)):
            raise InvalidParameterError(f"backup {name!r} exists already under {self.root}: give a new name")
        return dest

    # ---- on the service thread ----------------------------------------------------------------

    def plan(self, dest: str) -> Plan:
        """Take the snapshot (module docstring): links made, open files held, memory copied."""
        store = self.store
        os.makedirs(_partial(dest))
        plan = Plan(dest)
        try:
            cut = store.max_phys_offset
            self._commit_log(plan, cut)
            queues = self._queues(plan)
            index_end = self._index(plan)
            self._compacted(plan)
            tiered = self._tiered(plan)
            plan.ckpt = checkpoint.Checkpoint(flushed_offset=cut, logics_offset=max(0, min(cut, index_end)))
            meta = self.metadata
            plan.metadata = {"topics": dict(meta.topics), "groups": dict(meta.groups),
                             "offsets": [[g, t, q, o] for (g, t, q), o in meta.offsets.items()],
                             "acl": self.acl.acl.snapshot() if self.acl is not None else None}
            plan.manifest = {"backup_format": BACKUP_FORMAT, "quiver": __version__,
                             "format": data_format.read(store.data_dir), **self.identity,
                             "taken_ms": int(time.time() * 1000), "cut_offset": cut,
                             "min_offset": min(store.min_phys_offset, cut), "index_end": index_end,
                             "queues": queues, "offsets": len(plan.metadata["offsets"]), "tiered": tiered}
        except BaseException:
            _close(plan)
            shutil.rmtree(_partial(dest), ignore_errors=True)   # nothing of it is kept: the name stays free
            raise
        return plan

    def _commit_log(self, plan: Plan, cut: int) -> None:
        segs = [s for s in self.store.commit_log.segments if s.start < cut]
        for i, seg in enumerate(segs):
            sealed = i < len(segs) - 1 or seg is not self.store.commit_log.segments[-1]
            self._take(plan, seg.path, os.path.join("commitlog", os.path.basename(seg.path)),
                       min(seg.size, cut - seg.start), sealed and seg.end <= cut)

    def _queues(self, plan: Plan) -> dict:
        out = {}
        for (topic, qid), cq in list(self.store.cqs.items()):
            rel_dir = os.path.join("consumequeue", topic, str(qid))
            for i, f in enumerate(cq.files):
                self._take(plan, f.path, os.path.join(rel_dir, os.path.basename(f.path)), f.size,
                           i < len(cq.files) - 1)
            out[f"{topic}/{qid}"] = [cq.min_offset, cq.max_offset]
        return out

    def _index(self, plan: Plan) -> int:
        """Full index files linked; returns the CommitLog offset they cover up to (-1: none)."""
        files = self.store.index.files
        sealed = [f for f in files if f.full or f is not files[-1]]
        for f in sealed:
            self._take(plan, f.path, os.path.join("index", os.path.basename(f.path)), os.path.getsize(f.path), True)
        return next((f.end_phy for f in reversed(sealed) if f.count > 1), -1)

    def _compacted(self, plan: Plan) -> None:
        """Compacted topics' logs, hard-linked: a pass replaces a log whole (a rename), never in
        place, and once it covers a segment retention may delete that segment from the CommitLog."""
        compaction = getattr(self.store, "compaction", None)
        for log_ in list(compaction.logs.values()) if compaction is not None else ():
            rel = os.path.relpath(log_.path, self.store.data_dir)
            self._take(plan, log_.path, rel, os.path.getsize(log_.path), True)

    def _tiered(self, plan: Plan) -> dict | None:
        """The tiered store's records of uploaded segments, hard-linked (each is replaced whole):
        a restored broker pointed at the same store reads the remote-only segments through them."""
        tiered = getattr(self.store, "tiered", None)
        if tiered is None:
            return None
        taken = 0
        for name in sorted(os.listdir(tiered.dir) if os.path.isdir(tiered.dir) else ()):
            if len(name) == 25 and name.endswith(".json") and name[:20].isdigit():
                path = os.path.join(tiered.dir, name)
                try:
                    self._take(plan, path, os.path.join("tiered", name), os.path.getsize(path), True)
                except FileNotFoundError:
                    continue   # remote retention deleted it meanwhile: its segment is gone
                taken += 1
        return {"store": tiered.objects.url, "segments": taken, "remote_min": tiered.remote_min()}

    def _take(self, plan: Plan, src: str, rel: str, length: int, sealed: bool) -> None:
        dst = os.path.join(_partial(plan.dest), rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if sealed and os.path.getsize(src) == length:
            try:
                os.link(src, dst)
                plan.parts.append(Part(rel, length))
                plan.linked += 1
                return
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
                    raise
        plan.parts.append(Part(rel, length, os.open(src, os.O_RDONLY)))

    # ---- on the worker thread -----------------------------------------------------------------

    def _write(self, plan: Plan, req) -> None:
        started = time.monotonic()
        try:
            copied = write_out(plan)
            if plan.url:
                _close(plan)
                copied = self._upload(plan)
            else:
                os.rename(_partial(plan.dest), plan.dest)
                data_format.fsync_dir(os.path.dirname(plan.dest))
        except backup_s3.BackupExists as exc:
            shutil.rmtree(_partial(plan.dest), ignore_errors=True)
            self.reply_later(self._done, req, ResponseCode.INVALID_PARAMETER, str(exc), None)
            return
        except Exception as exc:
            log.exception("backup to %s failed", plan.url or plan.dest)
            if plan.url:
                shutil.rmtree(_partial(plan.dest), ignore_errors=True)
                remark = (f"backup to {plan.url} failed: {exc} (the objects put so far have no {MANIFEST}, so no "
                          f"restore takes them; take the backup again, to that prefix or another)")
            else:
                remark = (f"backup to {plan.dest} failed: {exc!r} (the partial copy {_partial(plan.dest)} "
                          f"is left for inspection; delete it)")
            self.reply_later(self._done, req, ResponseCode.SYSTEM_ERROR, remark, None)
            return
        finally:
            _close(plan)
        m = plan.manifest
        reply = rq.BrokerBackupReply(path=plan.url or plan.dest, cut_offset=m["cut_offset"], files=len(plan.parts),
                                     linked_files=plan.linked, copied_bytes=copied, queues=len(m["queues"]),
                                     offsets=m["offsets"], took_ms=int((time.monotonic() - started) * 1000))
        log.info("backup written to %s: CommitLog up to %d, %d files (%d hard-linked), %d bytes copied",
                 plan.url or plan.dest, m["cut_offset"], len(plan.parts), plan.linked, copied)
        self.reply_later(self._done, req, ResponseCode.SUCCESS, "", reply)

    def _upload(self, plan: Plan) -> int:
        """The staged copy into the object store (manifest last), then deleted; the bytes put."""
        objects = backup_s3.open_objects(plan.url, plan.endpoint, self.s3[1])
        try:
            with open(os.path.join(_partial(plan.dest), MANIFEST), "rb") as f:
                manifest = json.loads(f.read())
            return backup_s3.upload(_partial(plan.dest), manifest, objects)
        finally:
            shutil.rmtree(_partial(plan.dest), ignore_errors=True)
            objects.client.close()

    def _done(self, req, code, remark, reply) -> None:
        self.running = None
        req.reply(code, remark, reply)


def write_out(plan: Plan) -> int:
    """Copy the open files, write checkpoint, metadata, FORMAT and (last) the manifest, all
    fsynced; returns the bytes copied."""
    base = _partial(plan.dest)
    copied = 0
    for part in plan.parts:
        if part.fd is not None:
            copied += _copy(part.fd, os.path.join(base, part.rel), part.length)
    cp_file = checkpoint.CheckpointFile(os.path.join(base, "checkpoint"))
    try:
        cp_file.write(plan.ckpt)
    finally:
        cp_file.close()
    fmt = plan.manifest["format"] or {"format": data_format.CURRENT, "oldest_reader": data_format.OLDEST_READER}
    data_format.write(base, fmt["format"], fmt["oldest_reader"])
    _write_json(os.path.join(base, METADATA), plan.metadata)
    for d in {os.path.dirname(os.path.join(base, p.rel)) for p in plan.parts}:
        data_format.fsync_dir(d)
    plan.manifest["files"] = {p.rel: p.length for p in plan.parts}
    _write_json(os.path.join(base, MANIFEST), plan.manifest)
    return copied


def _copy(src_fd: int, dst: str, length: int) -> int:
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        pos = 0
        while pos < length:
            data = os.pread(src_fd, min(CHUNK, length - pos), pos)
            if not data:
                raise OSError(errno.EIO, f"{dst}: source ended at {pos} of {length} bytes")
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            pos += len(data)
        os.fsync(fd)
    finally:
        os.close(fd)
    return length


def _write_json(path: str, data) -> None:
    with open(path, "wb") as f:
        f.write(json.dumps(data, sort_keys=True).encode())
        f.flush()
        os.fsync(f.fileno())


def _partial(dest: str) -> str:
    """Where a backup is written until it is whole ('.' names cannot be asked for)."""
    return os.path.join(os.path.dirname(dest), "." + os.path.basename(dest) + ".partial")


def _close(plan: Plan) -> None:
    for part in plan.parts:
        if part.fd is not None:
            try:
                os.close(part.fd)
            except OSError:
                pass
            part.fd = None
