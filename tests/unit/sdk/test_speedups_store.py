"""The broker's compiled store twins against their Python references: the one-step put
(appending.put_run), the store writing the same files through it as through the general
path, and the pull's walk over ConsumeQueue entries (queue_reads.pick_entries).

The twin must return what the reference returns and write the same bytes, or decline before
writing; hostile arguments (wrong types, ints out of range, lone surrogates, bad descriptors)
end as the reference ends, exception type and text included. A write that fails half-way is
cut back by the store whichever path wrote it.
"""

import os
import zlib

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from quiver.wire import record, speedups
from quiver.wire.property_string import format_properties
from quiver_broker import appending, queue_reads, store as store_module
from quiver_broker.consume_queue import ENTRY
from quiver_broker.store import MessageStore, PutStatus

try:
    from quiver import _speedups as C
except ImportError:
    C = None
if C is not None and not speedups.ACTIVE:
    speedups.hand_over(C)   # QUIVER_NO_SPEEDUPS: the twin is still tested, with the layouts it needs
FUZZ = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                         HealthCheck.function_scoped_fixture])
HOST = b"\x7f\x00\x00\x01\x00\x00\x2a\x9f"
I32 = st.integers(-(2**31), 2**31 - 1)
WIDE = st.one_of(I32, st.integers(-(2**70), 2**70))
text = st.text(st.sampled_from("aZ09 _#é名😀\x01\x02"), max_size=30)


def _c():
    if C is None:
        pytest.skip("quiver._speedups is not built (test_speedups fails for that)")
    return C


def test_the_put_and_pull_paths_take_the_twins_unless_forced_off():
    for f in (appending.put_run, queue_reads.pick_entries, queue_reads.run_end):
        assert (f is not f.reference) == speedups.ACTIVE


def _outcome(fn, args, files):
    for f in files:
        f.seek(0)
        f.truncate()
        f.write(b"\xee" * 7)   # bytes before the positions stay as they are
        f.flush()
    try:
        out = ("ok", fn(*args))
    except Exception as exc:  # noqa: BLE001 - the type and text are what is compared
        out = ("raised", type(exc), str(exc))
    return out, [open(f.name, "rb").read() for f in files]


@st.composite
def put_args(draw, hostile=True):
    n = draw(st.integers(0, 5))
    bodies = draw(st.lists(st.binary(max_size=200), min_size=n, max_size=n))
    props = draw(st.lists(text.map(lambda s: format_properties({"TAGS": s, "KEYS": s + " k", "UNIQ_KEY": "u" + s})),
                          min_size=n, max_size=n))
    if hostile and draw(st.integers(0, 7)) == 0:
        props = props[:-1] + ["\ud800"]   # a lone surrogate: the reference's business
    pbs = [p.encode("utf-8", "surrogatepass") for p in props]
    ints = WIDE if hostile else I32
    flags = draw(st.lists(ints, min_size=n, max_size=n))
    crcs = draw(st.one_of(st.none(), st.lists(ints, min_size=n, max_size=n)))
    head = record.RunHead(draw(st.binary(min_size=1, max_size=20)), draw(ints), draw(st.integers(0, 2**40)),
                          draw(st.integers(0, 2**40)), draw(ints), draw(ints), HOST, draw(ints), HOST, 0, 0)
    prefix = draw(st.one_of(st.integers(0, 2**32 - 1), st.just(2**32) if hostile else st.nothing()))
    at = draw(st.sampled_from([7, 7, 7, 0, -1, 2**64])) if hostile else 7
    return head, bodies, flags, pbs, props, crcs, False, prefix, at


def _run(tmp_path, args, bad_fd=None):
    head, bodies, flags, pbs, props, crcs, prop_crc, prefix, at = args
    with open(tmp_path / "cl", "w+b") as cl, open(tmp_path / "cq", "w+b") as cq:
        fds = [cl.fileno(), cq.fileno()]
        if bad_fd is not None:
            fds[bad_fd] = 10**6   # no such descriptor: EBADF at that write
        call = (head, bodies, flags, pbs, props, crcs, prop_crc, prefix, fds[0], at, fds[1], at)
        want = _outcome(appending.put_run.reference, call, (cl, cq))
        got = _outcome(_c().put_run, call, (cl, cq))
        if got[0] != ("ok", NotImplemented):
            assert got == want, "the twin answered where the reference says otherwise"
        assert _outcome(appending.put_run, call, (cl, cq)) == want
    return got[0] != ("ok", NotImplemented), want


@FUZZ
@given(put_args())
def test_put_run_matches(tmp_path, args):
    _run(tmp_path, args)


@FUZZ
@given(put_args(hostile=False))
def test_put_run_answers_well_formed_puts_itself(tmp_path, args):
    answered, (out, files) = _run(tmp_path, args)
    assert answered and out[0] == "ok"
    data, offsets, sizes = record.encode_run.reference(*args[0:4], args[5], False)
    assert files[0] == b"\xee" * 7 + data and out[1][:3] == (len(data), offsets, sizes)
    assert len(files[1]) == 7 + 20 * len(sizes)


@pytest.mark.parametrize("which", [0, 1])
def test_a_bad_descriptor_fails_as_the_reference_does(tmp_path, which):
    props = [format_properties({"KEYS": "a b", "TAGS": "t"})]
    head = record.RunHead(b"T", 0, 5, 1000, 0, 1, HOST, 2, HOST, 0, 0)
    args = (head, [b"body"], [0], [p.encode() for p in props], props, None, False, zlib.crc32(b"T#"), 7)
    answered, (out, files) = _run(tmp_path, args, bad_fd=which)
    assert out[:2] == ("raised", OSError) and "Bad file descriptor" in out[2]
    data = record.encode_run.reference(head, args[1], args[2], args[3])[0]
    assert files == ([b"\xee" * 7] * 2 if which == 0 else [b"\xee" * 7 + data, b"\xee" * 7])


# ---- the store: the same files either way, and a failed write cut back -------------------

def _store(path):
    s = MessageStore(str(path), segment_bytes=1 << 20, cq_entries_per_file=64, index_slots=64, index_entries=256,
                     flush_interval_ms=3_600_000)
    s.disk.check_interval_s = 0
    s.open()
    return s


def _puts(s, rounds):
    for r in range(rounds):
        n = 1 + r % 3
        props = [format_properties({"TAGS": f"t{r}", "KEYS": f"k{r}-{i} x", "UNIQ_KEY": f"u{r}-{i}"})
                 for i in range(n)]
        res = s.put_batch("T", r % 2, [bytes([r]) * (10 + i) for i in range(n)], props, [0] * n, 0, 1, HOST)
        assert res.status is PutStatus.PUT_OK


def _files(root):
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            if "index" in d.split(os.sep)[-1:] or n in ("checkpoint", "abort"):
                continue
            out[os.path.relpath(os.path.join(d, n), root)] = open(os.path.join(d, n), "rb").read()
    return out


def test_the_store_writes_the_same_files_through_either_path(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module.time, "time", lambda: 1_700_000_000.0)
    used = []
    real = appending.put_fitting
    monkeypatch.setattr(appending, "put_fitting", lambda *a: used.append(1) or real(*a))
    one = _store(tmp_path / "one")
    _puts(one, 40)
    assert len(used) >= 30   # all but each queue's first put (no queue file yet)
    monkeypatch.setattr(appending, "fits", lambda *a: False)
    two = _store(tmp_path / "two")
    _puts(two, 40)
    assert len(used) < 40
    for s in (one, two):
        s.index.sync_header()
    idx = [bytes(s.index.files[-1].mm) for s in (one, two)]
    assert _files(tmp_path / "one") == _files(tmp_path / "two") and idx[0] == idx[1]
    assert [r.body for r in one.query_by_key("T", "x")] == [r.body for r in two.query_by_key("T", "x")]
    one.close()
    two.close()


@pytest.mark.parametrize("which", ["commitlog", "queue"])
def test_a_failed_write_of_the_one_step_put_is_cut_back(tmp_path, which):
    s = _store(tmp_path / "s")
    try:
        _puts(s, 4)
        cq = s.cqs[("T", 0)]
        seg, qf = s.commit_log.segments[-1], cq.files[-1]
        end, qmax, sizes = s.max_phys_offset, cq.max_offset, (seg.size, qf.size)
        target = seg if which == "commitlog" else qf
        real_fd, target.fd = target.fd, os.open(target.path, os.O_RDONLY)   # its writes fail: EBADF
        try:
            res = s.put_batch("T", 0, [b"lost"], [format_properties({"KEYS": "lost"})], [0], 0, 1, HOST)
        finally:
            os.close(target.fd)
            target.fd = real_fd
        assert res.status is PutStatus.WRITE_FAILED and "Bad file descriptor" in res.remark
        assert (s.max_phys_offset, cq.max_offset, seg.size, qf.size) == (end, qmax, *sizes)
        assert (os.path.getsize(seg.path), os.path.getsize(qf.path)) == sizes   # no torn bytes left
        s.disk.check()
        _puts(s, 2)
        assert s.get_messages("T", 0, qmax, 8).count == 1 and not s.query_by_key("T", "lost")
    finally:
        s.close()


# ---- the pull's walk over queue entries ---------------------------------------------------

def _pick_outcome(fn, raw, hashes, min_phys, picked, *rest):
    picked = list(picked)
    try:
        return "ok", fn(raw, hashes, min_phys, picked, *rest), picked
    except Exception as exc:  # noqa: BLE001
        return "raised", type(exc), str(exc), picked


entries = st.lists(st.tuples(st.one_of(st.integers(0, 5000), WIDE.filter(lambda v: -2**63 <= v < 2**63)),
                             st.one_of(st.integers(-2, 300), I32), st.integers(-3, 3)), max_size=40)


@FUZZ
@given(entries, st.one_of(st.none(), st.frozensets(st.integers(-3, 3)), st.sets(st.integers(-3, 3))),
       st.integers(-1, 3000), st.lists(st.tuples(st.integers(0, 99), st.integers(1, 99)), max_size=2),
       st.integers(0, 500), st.integers(-1, 40), st.one_of(st.integers(-1, 5000), WIDE), st.integers(0, 9))
def test_pick_entries_matches(rows, hashes, min_phys, picked, total, max_msgs, max_bytes, odd):
    raw = b"".join(ENTRY.pack(*r) for r in rows)
    args = [raw, hashes, min_phys, picked, total, max_msgs, max_bytes]
    if odd == 0:
        args[0] = raw + b"\x00" * 7           # a torn entry: struct's error
    elif odd == 1:
        args[1] = [1, 2]                      # not a set: the reference's business
    elif odd == 2:
        args[4] = 2**70                       # past what the twin adds up
    want = _pick_outcome(queue_reads.pick_entries.reference, *args)
    got = _pick_outcome(_c().pick_entries, *args)
    if got[1] is NotImplemented:
        assert got[2] == list(picked)         # declined before touching the list
        assert odd <= 2 or not -2**63 <= max_bytes < 2**63, "a well-formed walk is the twin's own"
    else:
        assert got == want
        assert odd > 2 or not rows or want[0] != "ok"   # hostile forms are declined
    assert _pick_outcome(queue_reads.pick_entries, *args) == want


spans = st.tuples(st.one_of(st.integers(0, 3000), WIDE), st.one_of(st.integers(1, 300), WIDE))


@FUZZ
@given(st.lists(st.one_of(spans, spans.map(list)), max_size=12), st.integers(-2, 13),
       st.one_of(st.integers(0, 4000), WIDE), st.one_of(st.sampled_from([0, 16, 200, 16 << 10]), WIDE))
def test_run_end_matches(picked, i, seg_end, gap):
    def outcome(fn):
        try:
            return "ok", fn(picked, i, seg_end, gap)
        except Exception as exc:  # noqa: BLE001
            return "raised", type(exc), str(exc)
    want = outcome(queue_reads.run_end.reference)
    got = _c().run_end(picked, i, seg_end, gap)
    if got is not NotImplemented:
        assert ("ok", got) == want
    elif 0 <= i < len(picked) and all(type(t) is tuple and all(abs(v) < 2**61 for v in t) for t in picked) \
            and abs(seg_end) < 2**61 and abs(gap) < 2**61:
        raise AssertionError("a well-formed run is the twin's own")
    assert outcome(queue_reads.run_end) == want
