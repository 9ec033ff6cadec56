"""The disk guard: limits, hysteresis, the byte budget between statvfs calls, write errors."""

import errno

from quiver_broker.disk_space import MIB, DiskSpace, statvfs_usage


class Usage:
    """A fake partition: statvfs_usage's shape; counts the calls."""

    def __init__(self, total=1000 * MIB, used=100 * MIB):
        self.total, self.used, self.calls = total, used, 0

    def __call__(self, path):
        self.calls += 1
        return self.total, self.used, self.total - self.used


def guard(usage, **kw):
    kw.setdefault("min_free_bytes", 0)
    return DiskSpace("/data/broker-a", usage=usage, **kw)


def test_writable_disk_is_checked_once_per_budget():
    u = Usage()
    g = guard(u, check_bytes=10 * MIB, check_interval_ms=60_000)
    assert all(g.refusal(MIB) is None for _ in range(10))
    assert u.calls == 1                    # ten puts, one statvfs
    assert g.refusal(MIB) is None and u.calls == 2  # the budget ran out: checked again
    assert not g.full and g.refused == 0


def test_refused_past_the_ratio_with_remark_and_resumes_below_the_lower_one():
    u = Usage(used=930 * MIB)
    g = guard(u, check_interval_ms=0)
    why = g.refusal(100)
    assert why == "disk 93 % full on /data/broker-a; writes resume below 85 %"
    assert g.full and g.refused == 1
    u.used = 880 * MIB                     # below 90 %, above 85 %: still refused
    assert g.refusal(100) == "disk 88 % full on /data/broker-a; writes resume below 85 %"
    u.used = 840 * MIB
    assert g.refusal(100) is None and not g.full


def test_a_put_that_would_cross_the_limit_is_refused_before_writing_and_marks_the_disk_full():
    u = Usage(used=899 * MIB)
    g = guard(u, check_interval_ms=0)
    assert g.refusal(MIB // 2) is None
    assert g.refusal(2 * MIB) == (f"disk 89 % full on /data/broker-a ({2 * MIB} more bytes would pass 90 %); "
                                  "writes resume below 85 %")
    assert g.full and g.refusal(1) is not None   # full like past the limit: until below 85 %


def test_min_free_bytes_refuses_whatever_the_ratio():
    u = Usage(total=100 * MIB, used=70 * MIB)
    g = guard(u, min_free_bytes=32 * MIB, check_interval_ms=0)
    why = g.refusal(1)
    assert why.startswith("disk has 30 MiB free on /data/broker-a (70 % full), below the 32 MiB minimum")
    u.used = 60 * MIB
    assert g.refusal(1) is None


def test_while_full_statvfs_runs_once_per_interval():
    u = Usage(used=950 * MIB)
    g = guard(u, check_interval_ms=60_000)
    for _ in range(100):
        assert g.refusal(10) is not None
    assert u.calls == 1 and g.refused == 100


def test_a_write_error_refuses_until_the_next_check_finds_room():
    u = Usage()
    g = guard(u, check_interval_ms=60_000)
    assert g.refusal(10) is None
    why = g.write_failed("a put", OSError(errno.ENOSPC, "No space left on device"))
    assert why.startswith("a put failed on /data/broker-a: No space left on device; nothing of this put")
    assert g.refusal(10) == why and g.write_errors == 1
    g._next_check = 0                      # the interval passed; the disk has room again
    assert g.refusal(10) is None and not g.full


def test_unreadable_usage_refuses():
    def broken(path):
        raise OSError(errno.EIO, "I/O error")
    g = guard(broken)
    assert "cannot read the disk usage" in g.refusal(1)


def test_statvfs_usage_of_a_real_directory(tmp_path):
    total, used, free = statvfs_usage(str(tmp_path))
    assert total > 0 and 0 <= used <= total and 0 <= free <= total


def test_stats_name_the_state():
    g = guard(Usage(used=950 * MIB), check_interval_ms=0)
    g.refusal(1)
    st = g.stats()
    assert st["disk_full"] and st["disk_refusal"].startswith("disk 95 %") and st["puts_refused_disk"] == 1
