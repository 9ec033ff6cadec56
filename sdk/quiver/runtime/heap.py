"""Large buffers reused from the heap instead of mapped and unmapped each time (the broker's and
the Kafka gateway's processes: they move megabyte pull answers).

glibc maps a buffer over its mmap threshold on its own and unmaps it when freed, so each such
buffer is page faults (a fault and a zeroed page per 4 KiB) on first touch. A Kafka group
consumer's reads of 1 KiB messages cost the gateway 0.25-0.28 faults a message (about half its
system time) and the broker 0.15-0.3 on the gateway's 1 MiB pulls. Raised thresholds keep
buffers below 16 MiB in the heap, which keeps up to 64 MiB free at its top before giving memory
back: a bounded cost in resident memory for no faults.
"""

import ctypes

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3   # glibc's mallopt parameters
MMAP_THRESHOLD = 16 << 20
TRIM_THRESHOLD = 64 << 20


def keep_large_buffers() -> bool:
    """Set the thresholds; False where the C library has no mallopt (not glibc) or refuses them."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
