"""A compaction pass in a child process, so that it does not share the broker's GIL.

A pass on a thread of the broker shares the interpreter with the service thread: every
system call of a put then waits out a switch interval, and puts during a pass went at 0.3x
of their rate. So the compaction thread starts `python -m quiver_broker.compaction_child`
with the descriptors of what the pass reads - the CommitLog segments and ConsumeQueue
files of its range, the old compacted log - inherited as they are open in the broker (the
same files: retention unlinking one meanwhile does not matter, and the range a pass reads
is held by retention anyway), and a JSON spec on stdin. The child runs
compaction_pass.run (it writes the new compacted log: temp file, fsync, rename), prints
its counts and exits; the broker loads the new log and installs it (compaction.py). The
child runs at a lower priority (os.nice) and dies with the thread that started it
(PR_SET_PDEATHSIG), so a kill -9 of the broker leaves the old log or the new one, as
with a pass on a thread.
"""

from __future__ import annotations

import bisect
import ctypes
import json
import os
import signal
import subprocess
import sys

from . import compacted_log, compaction_pass
from .compacted_log import CompactedLog
from .consume_queue import ENTRY_SIZE

NICE = 10   # the child's priority below the broker's threads (os.nice increment)
PR_SET_PDEATHSIG = 1


class _Files:
    """Reads at a logical offset over (start, fd, size) files: the child's CommitLog (`segment_for`,
    `read` as CommitLog's) and ConsumeQueue (`read(offset, count)` as ConsumeQueue's)."""

    def __init__(self, files: list[list[int]], topic: str = "", queue_id: int = 0):
        self.files = sorted(files)
        self.starts = [f[0] for f in self.files]
        self.topic, self.queue_id = topic, queue_id

    def segment_for(self, offset: int):
        i = bisect.bisect_right(self.starts, offset) - 1
        if i < 0 or offset >= self.files[i][0] + self.files[i][2]:
            return None
        start, fd, size = self.files[i]
        return _Seg(start, fd, start + size)

    def pread(self, offset: int, size: int) -> bytes:
        seg = self.segment_for(offset)
        return b"" if seg is None else os.pread(seg.fd, min(size, seg.end - offset), offset - seg.start)

    def read(self, offset: int, size: int) -> bytes:   # a CommitLog's bytes [offset, offset + size)
        return self.pread(offset, size)


class _Queue(_Files):
    def read(self, offset: int, count: int) -> bytes:   # a ConsumeQueue's entries from `offset`
        return self.pread(offset * ENTRY_SIZE, count * ENTRY_SIZE)


class _Seg:
    __slots__ = ("start", "fd", "end")

    def __init__(self, start: int, fd: int, end: int):
        self.start, self.fd, self.end = start, fd, end


def spec_of(cl, cq, old: CompactedLog | None, start: int, end: int, directory: str, now_ms: float,
            delete_retention_ms: int, bytes_per_s: int, nice: int = NICE) -> tuple[dict, list[int]]:
    """(the child's spec, the descriptors it inherits) for a pass over `cq`'s [start, end)."""
    first = cq.entry(start) if start < end else None
    last = cq.entry(end - 1) if start < end else None
    lo, hi = (first[0], last[0] + last[1]) if first and last else (0, 0)
    with cl.lock:
        segs = [[s.start, s.fd, s.size] for s in cl.segments if s.start < hi and s.end > lo]
    lo_b, hi_b = start * ENTRY_SIZE, end * ENTRY_SIZE
    files = [[f.start, f.fd, f.size] for f in list(cq.files) if f.start < hi_b and f.end > lo_b]
    spec = {"parent": os.getpid(), "segments": segs, "topic": cq.topic, "queue_id": cq.queue_id, "queue": files,
            "old": [old.path, old.fd] if old is not None else None, "start": start, "end": end,
            "directory": directory, "now_ms": now_ms, "delete_retention_ms": delete_retention_ms,
            "bytes_per_s": bytes_per_s, "nice": nice}
    fds = [s[1] for s in segs] + [f[1] for f in files] + ([old.fd] if old is not None else [])
    return spec, fds


def run(spec: dict, fds: list[int], started=lambda proc: None) -> tuple[int, int, float | None]:
    """Run the pass of `spec` in a child process: (records read, kept, when the first kept
    tombstone goes or None). compaction_pass.PassFailed if it did not finish (nothing replaced);
    `started(proc)` is told the child (for close to stop it)."""
    proc = subprocess.Popen([sys.executable, "-m", "quiver_broker.compaction_child"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=sorted(set(fds)))
    started(proc)
    out, err = proc.communicate(json.dumps(spec).encode())
    if proc.returncode != 0:
        why = err.decode(errors="replace").strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
        raise compaction_pass.PassFailed(f"the compaction process failed: {why[0]}")
    got = json.loads(out)
    return got["read"], got["kept"], got["due"]


def _die_with_parent(parent: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):   # not Linux: the broker's close() still kills it
        pass
    if os.getppid() != parent:   # the broker died before the prctl took
        os._exit(1)


def main() -> None:
    spec = json.load(sys.stdin)
    _die_with_parent(spec["parent"])
    os.nice(spec["nice"])
    old = compacted_log.opened(*spec["old"]) if spec["old"] else None
    cl = _Files(spec["segments"])
    cq = _Queue(spec["queue"], spec["topic"], spec["queue_id"])
    read, kept, due, new = compaction_pass.run(
        cl, cq, old, spec["start"], spec["end"], spec["directory"], spec["now_ms"], spec["delete_retention_ms"],
        compaction_pass.Throttle(spec["bytes_per_s"]), lambda point: None)
    new.close()
    sys.stdout.write(json.dumps({"read": read, "kept": kept, "due": due}))


if __name__ == "__main__":
    main()
