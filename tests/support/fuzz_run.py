"""One fuzz run against one service, and the checks every service gets after it.

    run = FuzzRun(env, env.broker, out)        # seed, canary, context, memory and tree before
    run.general()                              # every code x field x poison, then random mutations
    run.oversized()                            # frames past any cap, and one 256 MiB frame
    run.paths()                                # path-shaped names in every name field
    run.standard_checks(checks)                # alive, PING, round trip, canary, RSS, replies, tree

Each phase prints a summary line (frames sent, replies by response code) to the
terminal, so the CI log shows the fuzz counts of every service.

Environment: QUIVER_FUZZ_SEED replays a run (the seed is printed), QUIVER_FUZZ_DEADLINE_S
bounds the general phase (60 s; cut short, the coverage check fails), QUIVER_FUZZ_RANDOM
sets the random frames sent after the systematic ones (4000).
"""

import collections
import itertools
import random
import time

from quiver.wire.codes import RequestCode
from quiver.wire.transport import Transport

from .fuzz import Context, FrameSource, path_names
from .fuzz_cluster import (FUZZ_DEADLINE_S, HUGE_FRAME_BYTES, MIN_FRAMES, RANDOM_FRAMES, RSS_BOUND_BYTES,
                           fuzz_seed, memory, ping, snapshot, snapshot_diff, status)
from .fuzz_controls import Canary, round_trip
from .fuzz_pipe import FuzzStats, huge_frame, run_frames, send_oversized

MIB = 1 << 20


class _Tracked:
    """Counts what an iterator yielded and whether it ran to its end."""

    def __init__(self, it):
        self.it, self.n, self.done = it, 0, False

    def __iter__(self):
        for item in self.it:
            self.n += 1
            yield item
        self.done = True


def fuzz_context(env, rng) -> Context:
    """Base values pointing at real things: a FuzzT message's CommitLog offset and an open half message."""
    t = Transport("fuzz-ctx", credentials=env.credentials)
    try:
        now = int(time.time() * 1000)
        props = "UNIQ_KEY\x01" + "A" * 32 + "\x02KEYS\x01fuzz-key\x02"
        ext = {"t": "FuzzT", "q": 0, "b": now, "g": "fuzz-pg", "m": [[0, props]]}
        phys = t.call(env.broker.addr, RequestCode.SEND_MESSAGE, ext, [b"fuzz-seed"]).ext["p"][0]
        txid = f"{rng.getrandbits(128):032X}"
        ext = {**ext, "sf": 4, "m": [[0, f"UNIQ_KEY\x01{txid}\x02TRAN_MSG\x01true\x02PGROUP\x01fuzz-pg\x02"]]}
        half = t.call(env.broker.addr, RequestCode.SEND_MESSAGE, ext, [b"fuzz-half"]).ext
    finally:
        t.close()
    return Context(broker_addr=env.broker.addr, broker_name=env.broker.name, phys=phys,
                   half=(half["p"][0], half["o"], txid), now_ms=now, victim=str(env.victim))


class FuzzRun:
    """The fuzz of one service: its seed, frame source, canary, and counts over all phases."""

    def __init__(self, env, svc, out, canary: bool = True):
        self.env, self.svc, self.out = env, svc, out
        self.seed = fuzz_seed()
        self.rng = random.Random(f"{self.seed}:{svc.name}")
        out(f"FUZZ service={svc.name} seed={self.seed} (replay: QUIVER_FUZZ_SEED={self.seed})")
        self.canary = Canary(env.ns, self.rng) if canary else None
        self.ctx = fuzz_context(env, self.rng)
        self.src = FrameSource(self.rng, self.ctx)
        out(f"FUZZ service={svc.name} fields: {self.src.key_source()}")
        for bad in self.src.invalid_bases():
            out(f"FUZZ service={svc.name} warning: base request refused by its schema: {bad}")
        self.tree_before = snapshot(env.snapshot_root, env.data_dir)
        self.mem_before = memory(svc.pid)
        self.pid = svc.pid
        self.total = FuzzStats()
        self.systematic_done = False
        self.systematic_sent = 0

    def _record(self, phase: str, stats: FuzzStats) -> FuzzStats:
        self.total.merge(stats)
        self.out(stats.summary(self.svc.name, self.seed, phase))
        return stats

    def general(self, deadline_s: float = FUZZ_DEADLINE_S) -> FuzzStats:
        systematic = _Tracked(self.src.systematic())
        frames = itertools.chain(systematic, itertools.islice(self.src.random(), RANDOM_FRAMES))
        stats = run_frames(self.svc.addr, frames, budget=10**9, deadline_s=deadline_s)
        self.systematic_done, self.systematic_sent = systematic.done, systematic.n
        return self._record("general", stats)

    def frames(self, phase: str, frames_iter, deadline_s: float = 30.0) -> FuzzStats:
        stats = run_frames(self.svc.addr, frames_iter, budget=10**9, deadline_s=deadline_s,
                           keep_accepted=phase.startswith("paths"))
        self._record(phase, stats)
        if stats.accepted:
            per_code = collections.Counter(a.split(":", 1)[0] for a in stats.accepted)
            reput = sorted({a.split(":path:", 1)[-1] for a in stats.accepted if a.startswith(("SCHEDULE_REPUT",
                            "DELETE_TOPIC", "UPDATE_AND_CREATE_TOPIC", "CONSUMER_SEND_MSG_BACK"))})
            self.out(f"FUZZ service={self.svc.name} phase={phase}: requests with a path-shaped name answered "
                     f"SUCCESS per code: {dict(per_code.most_common())}"
                     + (f"; topic-making ones: {' | '.join(reput[:12])}" if reput else ""))
        return stats

    def oversized(self) -> FuzzStats:
        stats = send_oversized(self.svc.addr, self.src.oversized())
        stats.merge(huge_frame(self.svc.addr, HUGE_FRAME_BYTES))
        return self._record("oversized", stats)

    def paths(self, deadline_s: float = 20.0) -> FuzzStats:
        """Every name field -> each path-shaped name; for the broker also re-puts creating such
        topics and deletes of them (in that order)."""
        names = path_names(str(self.env.victim))
        stats = self.frames("paths", self.src.paths(names), deadline_s)
        if self.svc is self.env.broker:
            stats.merge(self.frames("paths-reput-delete", self.src.reput_then_delete(names), deadline_s))
        return stats

    # ---- checks ---------------------------------------------------------------------------------

    def standard_checks(self, checks, settle_s: float = 1.0, memory: bool = True) -> None:
        """memory=False when the process was restarted on purpose (its memory was checked before)."""
        env, svc, st = self.env, self.svc, self.total
        time.sleep(settle_s)
        self.out(st.summary(svc.name, self.seed, "total"))
        checks.expect(st.sent >= MIN_FRAMES, f"at least {MIN_FRAMES} malformed frames sent", f"{st.sent}")
        checks.expect(self.systematic_done, "every code x field x poison sent within the deadline",
                      f"{self.systematic_sent} systematic frames")
        checks.expect(svc.alive(), "process alive",
                      f"pid {svc.pid}" if svc.alive() else f"exit code {svc.proc.returncode}:\n{svc.log_tail(15)}")
        checks.attempt("PING answers", ping, svc.addr)
        checks.attempt("STATUS answers", lambda: (True, str(status(svc.addr).get("counters", {}))[:300]))
        dead = [f"{s.name} (exit {s.proc.returncode})" for s in env.services if not s.alive()]
        checks.expect(not dead, "every other service still alive", ", ".join(dead))
        checks.attempt("send/pull round trip", round_trip, env.ns)
        if self.canary:
            checks.attempt("canary intact byte for byte", self.canary.check)
        if memory:
            self.memory_checks(checks)
        self.reply_checks(checks)
        self.tree_check(checks)

    def memory_checks(self, checks) -> None:
        if self.svc.pid != self.pid or not self.svc.alive():
            checks.expect(False, "RSS bounded", f"process {self.pid} is gone: no measurement")
            return
        now = memory(self.pid)
        before = self.mem_before["VmRSS"]
        grew, peak = now["VmRSS"] - before, now["VmHWM"] - before
        checks.expect(grew <= RSS_BOUND_BYTES, f"resident memory grew at most {RSS_BOUND_BYTES // MIB} MiB",
                      f"VmRSS {before // MIB} -> {now['VmRSS'] // MIB} MiB")
        checks.expect(peak <= RSS_BOUND_BYTES, f"peak memory at most {RSS_BOUND_BYTES // MIB} MiB over the start",
                      f"VmRSS before {before // MIB} MiB, VmHWM after {now['VmHWM'] // MIB} MiB "
                      f"(a {HUGE_FRAME_BYTES // MIB} MiB frame was sent; a capped socket never holds it)")

    def reply_checks(self, checks) -> None:
        st = self.total
        crashes = st.crashes()
        checks.expect(not crashes, "no malformed request ends in an unhandled exception (SYSTEM_ERROR 'XError: ...')",
                      f"{len(crashes)} distinct request fields:\n" + st.system_error_report())
        deliberate = len(st.system_errors) - len(crashes)
        if deliberate:
            self.out(f"FUZZ service={self.svc.name} SYSTEM_ERROR with a sentence for a remark (reported, not failed):\n"
                     + st.system_error_report(crashes=False))
        checks.expect(not st.undecodable, "every reply decodes", "; ".join(st.undecodable[:3]))
        checks.expect(not st.unknown_ids, "every reply carries an id that was sent (or -1)",
                      f"{len(st.unknown_ids)}: " + "; ".join(st.unknown_ids[:3]))
        checks.expect(not st.no_remark, "every error reply has a remark",
                      f"{len(st.no_remark)}: " + "; ".join(st.no_remark[:5]))

    def tree_check(self, checks) -> None:
        env = self.env
        after = snapshot(env.snapshot_root, env.data_dir)
        diff = snapshot_diff(self.tree_before, after)
        checks.expect(not diff, "nothing created, changed or deleted outside the data dir",
                      f"{len(diff)} paths under {env.snapshot_root}: " + "; ".join(diff[:12]))
        checks.expect(env.data_dir.is_dir() and (env.victim / "canary.txt").is_file(),
                      "data dir and victim dir still there")
