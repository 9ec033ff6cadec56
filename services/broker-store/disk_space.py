"""The disk guard: may the store write `n` more bytes now? Asked before every put.

Owns the yes/no and its remark, from statvfs of the store's partition; not
what frees space (retention) nor the rollback of a failed write (store)::

    used ratio  0 ........... resume_ratio (85 %) ... full_ratio (90 %) ... 1
                writable      |<- stays refused once full ->|  refused
    free bytes  refused below min_free_bytes, whatever the ratio

The ratios are RocketMQ's diskSpaceWarningLevelRatio (mark DISK_FULL, answer
SERVICE_NOT_AVAILABLE) and diskSpaceCleanForciblyRatio (where it is cleared).

Cheap: one statvfs, then a byte budget — the bytes that can still be written
before a limit is crossed, capped at `check_bytes` — and a deadline
(`check_interval_ms`, for other writers on the partition). Between checks a
put costs one subtraction and one clock read. A put larger than the room left
is refused before a byte is written.

A write that failed anyway (ENOSPC, EDQUOT, EIO ...) is reported with
`write_failed`: writes are refused with that error's remark until the next
check, `check_interval_ms` later, finds room again — so the broker resumes by
itself when space comes back. A failed CommitLog fsync is different
(`failed_for_good`): refused until a restart, see CommitLog.flush.
"""

import logging
import os
import time

log = logging.getLogger(__name__)

MIB = 1 << 20


def statvfs_usage(path: str) -> tuple[int, int, int]:
    """(total, used, available) bytes of the partition holding `path`."""
    st = os.statvfs(path)
    total = st.f_blocks * st.f_frsize
    return total, total - st.f_bfree * st.f_frsize, st.f_bavail * st.f_frsize


class DiskSpace:
    def __init__(self, path: str, full_ratio: float = 0.90, resume_ratio: float = 0.85,
                 min_free_bytes: int = 16 * MIB, check_bytes: int = 4 * MIB, check_interval_ms: int = 100,
                 usage=statvfs_usage):
        self.path = path
        self.full_ratio = full_ratio
        self.resume_ratio = min(resume_ratio, full_ratio)
        self.min_free_bytes = min_free_bytes
        self.check_bytes = check_bytes
        self.check_interval_s = check_interval_ms / 1000
        self.usage = usage          # tests replace it
        self.remark: str | None = None   # why writes are refused now; None: writable
        self.ratio = 0.0
        self.free_bytes = 0
        self.refused = 0            # puts refused (STATUS)
        self.write_errors = 0       # writes that failed and were rolled back (STATUS)
        self._budget = 0
        self._next_check = 0.0
        self._by_ratio = True       # the ratio, not min_free_bytes, is the limit reached first
        self.fatal: str | None = None   # set by failed_for_good: refused until restart

    @property
    def full(self) -> bool:
        return self.remark is not None

    def refusal(self, nbytes: int) -> str | None:
        """None if `nbytes` may be written now (and counts them), else why not. A put that would
        pass a limit marks the disk full like one already past it."""
        if time.monotonic() < self._next_check:
            if self.remark is not None:
                self.refused += 1
                return self.remark
            if nbytes <= self._budget:
                self._budget -= nbytes
                return None
        room = self.check()
        if self.remark is None and nbytes > room:
            self._refuse(self._full_remark(nbytes))
        if self.remark is not None:
            self.refused += 1
            return self.remark
        self._budget -= nbytes
        return None

    def check(self) -> int:
        """statvfs now: update the state and the budget; returns the bytes left before a limit."""
        try:
            total, used, free = self.usage(self.path)
        except OSError as exc:
            self._refuse(f"cannot read the disk usage of {self.path}: {exc}; writes refused")
            return 0
        self.ratio = used / total if total else 0.0
        self.free_bytes = free
        if self.fatal is not None:
            self._refuse(self.fatal)
            return 0
        was_full = self.remark is not None
        self._by_ratio = int(self.full_ratio * total) - used <= free - self.min_free_bytes
        if self.ratio > (self.resume_ratio if was_full else self.full_ratio) or free < self.min_free_bytes:
            self._by_ratio = free >= self.min_free_bytes
            self._refuse(self._full_remark())
            return 0
        if was_full:
            log.warning("disk %s %.0f%% used, %d MiB free: writes resume", self.path, self.ratio * 100,
                        free // MIB)
        self.remark = None
        room = min(int(self.full_ratio * total) - used, free - self.min_free_bytes)
        self._budget = min(room, self.check_bytes)
        self._next_check = time.monotonic() + self.check_interval_s
        return room

    def write_failed(self, what: str, exc: OSError) -> str:
        """A write failed and was rolled back: refuse until the next check; returns the remark."""
        self.write_errors += 1
        self._refuse(f"{what} failed on {self.path}: {exc.strerror or exc}; nothing of this put was stored, "
                     f"writes resume when the disk has room")
        return self.remark

    def failed_for_good(self, what: str, exc: OSError) -> str:
        """A failure no free space undoes (a CommitLog fsync): writes refused until a restart."""
        if self.fatal is None:
            self.write_errors += 1
            self.fatal = (f"{what} failed on {self.path}: {exc.strerror or exc}; what was not yet flushed may "
                          f"not be on disk: writes refused until the broker is restarted")
            log.error("refusing writes until restart: %s", self.fatal)
        self._refuse(self.fatal)
        return self.fatal

    def _refuse(self, remark: str) -> None:
        if self.remark is None:
            log.warning("refusing writes: %s", remark)
        self.remark = remark
        self._budget = 0
        self._next_check = time.monotonic() + self.check_interval_s

    def _full_remark(self, adding: int = 0) -> str:
        pct = int(self.ratio * 100)
        more = f" ({adding} more bytes would pass {self.full_ratio * 100:.0f} %)" if adding else ""
        if self._by_ratio:
            return f"disk {pct} % full on {self.path}{more}; writes resume below {self.resume_ratio * 100:.0f} %"
        more = f", {adding} more bytes would leave less" if adding else ""
        return (f"disk has {self.free_bytes // MIB} MiB free on {self.path} ({pct} % full){more}, below the "
                f"{self.min_free_bytes // MIB} MiB minimum; writes resume when more is free")

    def stats(self) -> dict:
        """The state for STATUS, checked again first if the last check is older than the interval."""
        if time.monotonic() >= self._next_check:
            self.check()
        return {"disk_ratio": self.ratio, "disk_free_bytes": self.free_bytes, "disk_full": self.full,
                "disk_refusal": self.remark or "", "puts_refused_disk": self.refused,
                "write_errors": self.write_errors}
