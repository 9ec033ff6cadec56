"""The ceilings nothing above them can beat on this machine: the pyzmq wire and the disk.

Wire: bench.core.raw_ceilings (a bare DEALER -> ROUTER echo, 1 KiB frames).
Disk: append 1 KiB records to a file in a temp dir with one write() each, with
no fsync, and with an fdatasync after every 64 KiB (the SYNC-flush ceiling).
"""

import os
import tempfile
import time

from bench.core import raw_ceilings
from bench.peers import base


def disk_append(n: int, sync_every_bytes: int | None, size: int = 1024) -> float:
    """Records per second appending n records of `size` bytes."""
    rec = b"r" * size
    with tempfile.TemporaryDirectory(prefix="quiver-bench-disk-") as d:
        fd = os.open(os.path.join(d, "log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            unsynced, t0 = 0, time.perf_counter()
            for _ in range(n):
                os.write(fd, rec)
                unsynced += size
                if sync_every_bytes and unsynced >= sync_every_bytes:
                    os.fdatasync(fd)
                    unsynced = 0
            return n / (time.perf_counter() - t0)
        finally:
            os.close(fd)


class Ceilings(base.System):
    name = "ceilings"
    durability = "raw pyzmq; disk append (no fsync / fdatasync per 64 KiB)"
    warm_up = False

    def raw(self, n: int) -> dict:
        r = raw_ceilings(n)
        return {"raw_1ack_msgs_s": r["raw_1ack_msgs"], "raw_batch_msgs_s": r["raw_batch_msgs"],
                "raw_rtt_p50_us": r["raw_rtt_p50_us"]}

    def disk(self, n: int) -> dict:
        return {"disk_nosync_recs_s": disk_append(n, None),
                "disk_fdatasync64k_recs_s": disk_append(n, 64 * 1024)}
