"""Pipelined fuzz sending: one DEALER, many frames in flight, replies counted as they come.

A service need not answer every garbage frame (a header with "r" is taken for
a reply, a capped socket drops the connection), so nothing waits for a reply
one by one: at most `window` frames are outstanding; when no reply comes for
`quiet_s` the outstanding ones are written off as unanswered and sending goes
on. `FuzzStats` counts replies by response code, per request code, and keeps
samples of the replies a strict service must never give (SYSTEM_ERROR, an
error without a remark, an id it was never sent).
"""

import collections
import re
import time
from dataclasses import dataclass, field

import zmq

from quiver.wire import protocol
from quiver.wire.curve import secure_client
from quiver.wire.codes import ResponseCode
from quiver.errors import ProtocolError

UNATTRIBUTED = protocol.UNATTRIBUTED_ID
EXCEPTION_REMARK = re.compile(r"^[A-Za-z_][\w.]*: ")  # "RecursionError: ...", "error: required argument ..."


def _code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return f"code_{code}"


@dataclass
class FuzzStats:
    sent: int = 0
    sent_bytes: int = 0
    replies: collections.Counter = field(default_factory=collections.Counter)        # response name -> n
    per_request: collections.Counter = field(default_factory=collections.Counter)    # (request, response) -> n
    pushes: int = 0               # requests the service pushed to us (NOTIFY_CONSUMER_IDS_CHANGED ...)
    undecodable: list = field(default_factory=list)   # replies protocol.decode refused
    unknown_ids: list = field(default_factory=list)   # replies carrying an id we never sent
    no_remark: list = field(default_factory=list)     # error replies with an empty remark
    system_errors: dict = field(default_factory=dict)  # request:field -> (label, remark), first of each
    accepted: list = field(default_factory=list)      # labels answered SUCCESS (kept when asked)
    stalls: int = 0
    elapsed_s: float = 0.0

    @property
    def answered(self) -> int:
        return sum(self.replies.values())

    def merge(self, other: "FuzzStats") -> None:
        self.sent += other.sent
        self.sent_bytes += other.sent_bytes
        self.replies.update(other.replies)
        self.per_request.update(other.per_request)
        self.pushes += other.pushes
        self.undecodable += other.undecodable
        self.unknown_ids += other.unknown_ids
        self.no_remark += other.no_remark
        for k, v in other.system_errors.items():
            self.system_errors.setdefault(k, v)
        self.accepted += other.accepted
        self.stalls += other.stalls
        self.elapsed_s += other.elapsed_s

    def summary(self, service: str, seed, phase: str = "total") -> str:
        codes = " ".join(f"{k}={v}" for k, v in sorted(self.replies.items(), key=lambda kv: -kv[1]))
        return (f"FUZZ service={service} phase={phase} seed={seed} frames={self.sent} "
                f"bytes={self.sent_bytes} replies={self.answered} unanswered={max(0, self.sent - self.answered)} "
                f"pushes={self.pushes} stalls={self.stalls} elapsed={self.elapsed_s:.1f}s | {codes}")

    def crashes(self) -> list[tuple[str, str]]:
        """SYSTEM_ERROR replies whose remark is an exception ("TypeError: ...", struct's "error: ..."):
        a handler met input it did not check. A SYSTEM_ERROR with a sentence for a remark is a
        deliberate answer (RocketMQ answers some refusals so) and is only reported."""
        return [(label, remark) for label, remark in self.system_errors.values() if EXCEPTION_REMARK.match(remark)]

    def system_error_report(self, limit: int = 30, crashes: bool = True) -> str:
        """Distinct remarks (digits folded), each with how many request fields got it and examples."""
        by_remark: dict[str, list] = {}
        for label, remark in self.system_errors.values():
            if bool(EXCEPTION_REMARK.match(remark)) != crashes:
                continue
            by_remark.setdefault(re.sub(r"\d+", "N", remark)[:110], []).append(label)
        rows = sorted(by_remark.items(), key=lambda kv: -len(kv[1]))
        text = "\n".join(f"  [{len(labels)} fields] {remark}\n      e.g. " + " | ".join(sorted(labels)[:4])
                         for remark, labels in rows[:limit])
        return text + (f"\n  ... and {len(rows) - limit} more distinct remarks" if len(rows) > limit else "")


class Pipe:
    """A DEALER connected to one service; `send` never blocks on a reply for long."""

    def __init__(self, addr: str, window: int = 256, quiet_s: float = 1.0, keep_accepted: bool = False,
                 credentials=None):
        self.addr = addr
        self.keep_accepted = keep_accepted
        self.window = window
        self.quiet_s = quiet_s
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, 0)
        self.sock.setsockopt(zmq.RCVHWM, 0)
        if credentials is not None:   # auth on: the fuzz speaks as this user
            secure_client(self.sock, credentials)
        self.sock.connect(f"tcp://{addr}")
        self.stats = FuzzStats()
        self.labels: dict[int, str] = {}
        self.inflight = 0
        self._t0 = time.monotonic()

    def close(self) -> None:
        self.stats.elapsed_s = time.monotonic() - self._t0
        self.sock.close(0)

    def send(self, frames: list, label: str, rid: int | None) -> None:
        while self.inflight >= self.window:
            if not self.collect(self.quiet_s):
                self.stats.stalls += 1
                self.inflight = 0  # the rest get no reply (long polls, dropped garbage): count and go on
        self.sock.send_multipart(frames, copy=True)
        self.stats.sent += 1
        self.stats.sent_bytes += sum(len(f) for f in frames)
        if rid is not None:
            self.labels[rid] = label
        else:
            self.labels.setdefault(UNATTRIBUTED, label)
        self.inflight += 1
        if self.stats.sent % 64 == 0:
            self.collect(0)

    def collect(self, timeout_s: float) -> int:
        """Read what has arrived (waiting up to timeout_s for the first); returns messages read
        (replies and pushes: either shows the service is still talking)."""
        n = 0
        if not self.sock.poll(int(timeout_s * 1000)):
            return 0
        while True:
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return n
            self._on_frames(frames)
            n += 1

    def finish(self, quiet_s: float = 2.0, max_s: float = 15.0) -> FuzzStats:
        """Read replies until `quiet_s` without one (or max_s), then close."""
        deadline = time.monotonic() + max_s
        while time.monotonic() < deadline and self.collect(quiet_s):
            pass
        self.close()
        return self.stats

    def _on_frames(self, frames: list) -> int:
        st = self.stats
        try:
            env = protocol.decode(frames)
        except ProtocolError as exc:
            st.undecodable.append(f"{exc}: {frames[:2]!r}"[:200])
            return 0
        if not env.is_reply:
            st.pushes += 1
            return 0
        self.inflight = max(0, self.inflight - 1)
        name = _code_name(env.code)
        st.replies[name] += 1
        if env.id == UNATTRIBUTED:
            label = self.labels.get(UNATTRIBUTED, "?")
        else:
            label = self.labels.pop(env.id, None)
            if label is None:
                st.unknown_ids.append(f"id {env.id}: {name} {env.remark[:80]!r}")
                label = "?"
        request = label.split(":", 1)[0]
        st.per_request[(request, name)] += 1
        if env.code == ResponseCode.SUCCESS and self.keep_accepted:
            st.accepted.append(label)
        if env.code != ResponseCode.SUCCESS and not env.remark:
            st.no_remark.append(f"{label} -> {name}")
        if env.code == ResponseCode.SYSTEM_ERROR:
            key = label.split("=", 1)[0] + ("!" if EXCEPTION_REMARK.match(env.remark) else "")
            st.system_errors.setdefault(key, (label[:90], env.remark[:160]))
        return 1


def run_frames(addr: str, frames_iter, budget: int, deadline_s: float, window: int = 256,
               keep_accepted: bool = False, credentials=None) -> FuzzStats:
    """Send up to `budget` frames from frames_iter within deadline_s; read the replies; return the counts."""
    pipe = Pipe(addr, window=window, keep_accepted=keep_accepted, credentials=credentials)
    end = time.monotonic() + deadline_s
    try:
        for frames, label, rid in frames_iter:
            if pipe.stats.sent >= budget or time.monotonic() > end:
                break
            pipe.send(frames, label, rid)
    finally:
        stats = pipe.finish()
    return stats


def _one_shot(addr: str, frames: list, label: str, rid: int | None, wait_s: float) -> FuzzStats:
    """Send one frame on a fresh DEALER; wait for its reply or for the service to drop the connection."""
    pipe = Pipe(addr, window=1)
    monitor = pipe.sock.get_monitor_socket(zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED)
    try:
        pipe.sock.send_multipart(frames, copy=False)
        pipe.stats.sent += 1
        pipe.stats.sent_bytes += sum(len(f) for f in frames)
        if rid is not None:
            pipe.labels[rid] = label
        poller = zmq.Poller()
        poller.register(pipe.sock, zmq.POLLIN)
        poller.register(monitor, zmq.POLLIN)
        end = time.monotonic() + wait_s
        while time.monotonic() < end:
            ready = dict(poller.poll(100))
            if pipe.sock in ready:
                pipe.collect(0)
                if pipe.stats.answered:
                    break
            if monitor in ready:
                pipe.stats.replies["DISCONNECTED"] += 1  # what a capped socket does with an oversized frame
                break
    finally:
        pipe.sock.disable_monitor()
        monitor.close(0)
        pipe.close()
    return pipe.stats


def send_oversized(addr: str, frames_iter, wait_s: float = 10.0) -> FuzzStats:
    """Frames past any sane cap, each on a fresh DEALER: a capped service drops that connection
    (counted as DISCONNECTED), an uncapped one answers. Either way the next frame starts clean."""
    total = FuzzStats()
    for frames, label, rid in frames_iter:
        total.merge(_one_shot(addr, frames, label, rid, wait_s))
    return total


def huge_frame(addr: str, size: int, wait_s: float = 20.0) -> FuzzStats:
    """One PING carrying a `size`-byte body frame: what a socket without MAXMSGSIZE swallows whole."""
    blob = bytearray(size)
    frames = [protocol.VERSION, protocol.request(9000, 424242)[1], memoryview(blob)]
    return _one_shot(addr, frames, f"big:PING+{size >> 20}MiB", 424242, wait_s)
