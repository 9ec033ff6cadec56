"""The broker and the Kafka gateway keep large buffers in the heap (quiver.runtime.heap): freed and allocated again, no page faults."""

import platform
import subprocess
import sys

import pytest


_CHURN = """
import resource, sys, threading
from quiver.runtime import heap
kept = heap.keep_large_buffers() if sys.argv[1] == "kept" else None
def churn():   # a Fetch's buffers: pull answers, conversions, answers of varying sizes, on two threads
    for i in range(100):
        a = bytearray(1 << 20)
        b = bytes(a) + b"x" * (i % 7)
        c = [bytes(300 << 10) for _ in range(4)]
        del a, b, c
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
t = threading.Thread(target=churn)
t.start()
t.join()
churn()
print(kept, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", _CHURN, mode], capture_output=True, text=True, timeout=60, check=True)
    kept, faults = out.stdout.split()
    return kept, int(faults)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt's thresholds are glibc's")
def test_freed_large_buffers_are_reused_without_page_faults():
    kept, with_heap = _faults("kept")
    assert kept == "True"   # on glibc the thresholds are always taken
    _, without = _faults("default")
    assert with_heap * 20 < without, (with_heap, without)   # glibc's defaults: ~100k faults, kept: ~1-2k
