"""What a fuzz test checks after the frames: SDK round trips, the canary, and the
controls of each poisoning class (issue 13). Each function returns (ok, detail)
for `Checks.attempt`, or raises (the exception is the symptom).

- canary: messages with binary bodies, keys and non-ASCII properties sent
  before the fuzz, pulled right away and again after: equal field by field;
- round trip: Producer.send then a fresh PullConsumer group pulls it back;
- delay control: a delay-level-1 (1 s) message reaches a waiting consumer
  within 2 s of its send (name server and scheduler poisoning);
- transaction control: a half message whose local state is UNKNOWN is
  checked by the txn-checker, the producer's checker says COMMIT, and the
  message is delivered (poison transaction properties);
- offsets control: a group's committed offsets, read back after a broker
  restart (offset poisoning);
- stats control: GET_CONSUME_STATS answers for a group with its offsets
  (heartbeat poisoning).
"""

import itertools
import os
import time

from quiver import Admin, Message, Producer, PullConsumer, TransactionProducer, TransactionState
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.wire.transport import Transport

CANARY_TOPIC = "FuzzCanary"
_seq = itertools.count(1)


# ---- reading a topic ---------------------------------------------------------------------

def read_topic(ns: str, topic: str, until, group: str | None = None, timeout: float = 15.0) -> list:
    """Pull `topic` from the start with a fresh group until until(messages) or the deadline."""
    group = group or f"fuzz-read-{next(_seq)}-{os.getpid()}"
    got = []
    with PullConsumer(group, namesrv=ns, consume_from="first") as pc:
        pc.subscribe(topic)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not until(got):
            got.extend(pc.poll(0.2))
    return got


def fingerprint(m) -> tuple:
    return (m.topic, m.queue_id, m.queue_offset, m.commit_log_offset, bytes(m.body), m.tags, tuple(m.keys),
            tuple(sorted(m.properties.items())), m.born_timestamp, m.store_timestamp, m.flag, m.sys_flag,
            m.body_crc, m.reconsume_times)


# ---- canary --------------------------------------------------------------------------------

def canary_messages(rng, n: int = 48) -> list[Message]:
    out = []
    for i in range(n):
        kind = i % 6
        body = [bytes(range(256)) * 4, b"\x00", b"\x01\x02\x01\x02", "çødé ünï 日本 🙂".encode(),
                rng.randbytes(1 << 20), rng.randbytes(rng.randint(1, 5000))][kind]
        out.append(Message(CANARY_TOPIC, body, tags=f"canary-{kind}", keys=[f"ck-{i}", "canary"],
                           properties={"seq": str(i), "ünï": "çødé", "rtl": "a\u202eb", "empty": ""}))
    return out


class Canary:
    """Sent before the fuzz, pulled at once (the reference) and again after each fuzz phase."""

    def __init__(self, ns: str, rng, n: int = 48):
        self.ns = ns
        self.sent = canary_messages(rng, n)
        with Producer("fuzz-canary-pg", namesrv=ns, auto_batch=False) as p:
            self.results = [p.send(m) for m in self.sent]
        self.ids = {r.msg_id for r in self.results}
        self.reference = self._read()
        missing = self.ids - set(self.reference)
        if missing:
            raise RuntimeError(f"canary not readable before the fuzz: {len(missing)} of {len(self.ids)} missing")
        for r, m in zip(self.results, self.sent):
            got = self.reference[r.msg_id]
            if (got.body, got.tags, got.keys) != (m.body, m.tags, m.key_list()) \
                    or any(got.properties.get(k) != v for k, v in m.properties.items()):
                raise RuntimeError(f"canary {r.msg_id} differs from what was sent before any fuzz")

    def _read(self) -> dict:
        got = read_topic(self.ns, CANARY_TOPIC, lambda g: self.ids <= {m.msg_id for m in g})
        return {m.msg_id: m for m in got if m.msg_id in self.ids}

    def check(self) -> tuple[bool, str]:
        now = self._read()
        missing = sorted(self.ids - set(now))
        changed = sorted(i for i in self.ids & set(now) if fingerprint(now[i]) != fingerprint(self.reference[i]))
        detail = f"{len(now)}/{len(self.ids)} read back"
        if missing:
            detail += f"; missing {len(missing)}: {missing[:3]}"
        if changed:
            a, b = fingerprint(self.reference[changed[0]]), fingerprint(now[changed[0]])
            diff = [k for k, (x, y) in enumerate(zip(a, b)) if x != y]
            detail += f"; changed {len(changed)} (first {changed[0]}, tuple fields {diff})"
        return not missing and not changed, detail


# ---- round trip ------------------------------------------------------------------------------

def round_trip(ns: str, topic: str = "FuzzRoundTrip", timeout: float = 15.0) -> tuple[bool, str]:
    tag = f"rt-{next(_seq)}-{time.monotonic_ns()}"
    msg = Message(topic, f"round trip {tag} \x00\xff".encode("utf-8", "surrogateescape"), tags="rt",
                  keys=[tag], properties={"tag": tag, "ü": "ç"})
    t0 = time.monotonic()
    with Producer("fuzz-rt-pg", namesrv=ns, auto_batch=False) as p:
        r = p.send(msg)
    got = read_topic(ns, topic, lambda g: any(m.msg_id == r.msg_id for m in g), timeout=timeout)
    mine = [m for m in got if m.msg_id == r.msg_id]
    if not mine:
        return False, f"sent {r.msg_id} ({r.status}) but a fresh group did not pull it in {timeout} s"
    m = mine[0]
    ok = m.body == msg.body and m.keys == [tag] and m.properties.get("tag") == tag and m.properties.get("ü") == "ç"
    return ok, f"{time.monotonic() - t0:.2f} s" if ok else f"pulled a different message: {fingerprint(m)[:8]}"


# ---- delay (scheduler) -----------------------------------------------------------------------

def delay_control(ns: str, limit_s: float = 2.0, topic: str = "FuzzDelay") -> tuple[bool, str]:
    """A delay-level-1 message (1 s) reaches a consumer that is already waiting within limit_s of the send."""
    tag = f"delay-{next(_seq)}-{time.monotonic_ns()}"
    with PullConsumer(f"fuzz-delay-{tag}", namesrv=ns, consume_from="first") as pc:
        pc.subscribe(topic)
        deadline = time.monotonic() + 10
        while not pc.assignment() and time.monotonic() < deadline:
            pc.poll(0.1)
        pc.poll(0.2)  # drain what earlier controls left, so the long poll is in place
        with Producer("fuzz-delay-pg", namesrv=ns, auto_batch=False) as p:
            t0 = time.monotonic()
            r = p.send(Message(topic, tag.encode(), tags="delay", delay_level=1))
            end = t0 + limit_s + 8.0  # keep looking past the limit, to say how late it was
            while time.monotonic() < end:
                if any(m.body == tag.encode() for m in pc.poll(0.05)):
                    took = time.monotonic() - t0
                    return took <= limit_s, f"delivered {took:.2f} s after the send (limit {limit_s} s)"
    return False, f"{r.msg_id} not delivered {limit_s + 8:.0f} s after the send"


# ---- transactions ----------------------------------------------------------------------------

def txn_control(ns: str, checker_addr: str | None = None, topic: str = "FuzzTx",
                timeout: float = 15.0) -> tuple[bool, str]:
    """UNKNOWN at send; the txn-checker must ask, the checker answers COMMIT, the message arrives.
    With checker_addr, a failure says what the txn-checker's STATUS shows (rounds, last round)."""
    tag = f"txn-{next(_seq)}-{time.monotonic_ns()}"
    body = tag.encode()
    with TransactionProducer(f"fuzz-txn-ctl-{next(_seq)}", namesrv=ns,
                             checker=lambda m: TransactionState.COMMIT if m.body == body else TransactionState.UNKNOWN
                             ) as tp:
        t0 = time.monotonic()
        r = tp.send_in_transaction(Message(topic, body, keys=[tag]), lambda m, a: TransactionState.UNKNOWN)
        got = read_topic(ns, topic, lambda g: any(m.body == body for m in g), timeout=timeout)
        checks = tp._checks_answered
    delivered = any(m.body == body for m in got)
    detail = f"half {r.transaction_id}: checks answered {checks}, " + (
        f"committed and delivered in {time.monotonic() - t0:.1f} s" if delivered else f"not delivered in {timeout} s")
    if not (delivered and checks >= 1) and checker_addr:
        detail += f"; txn-checker STATUS: {_checker_status(checker_addr)}"
    return delivered and checks >= 1, detail


def _checker_status(addr: str) -> str:
    t = Transport("fuzz-status")
    try:
        st = t.call(addr, RequestCode.STATUS, timeout=3.0).ext["status"]
        return str({k: st.get(k) for k in ("checks", "last_round", "last_round_ms", "brokers")})[:400]
    except Exception as exc:
        return f"no STATUS ({exc})"
    finally:
        t.close()


# ---- offsets and consume stats ----------------------------------------------------------------

def commit_offsets(broker_addr: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    t = Transport("fuzz-offsets")
    try:
        for qid, off in offsets.items():
            t.call(broker_addr, RequestCode.UPDATE_CONSUMER_OFFSET, {"g": group, "t": topic, "q": qid, "o": off})
    finally:
        t.close()


def read_offsets(broker_addr: str, group: str, topic: str, qids) -> dict[int, int | None]:
    t = Transport("fuzz-offsets")
    out = {}
    try:
        for qid in qids:
            env = t.call(broker_addr, RequestCode.QUERY_CONSUMER_OFFSET, {"g": group, "t": topic, "q": qid},
                         ok=tuple(ResponseCode))
            out[qid] = env.ext.get("offset") if env.code == 0 else f"{ResponseCode(env.code).name}: {env.remark}"
    finally:
        t.close()
    return out


def stats_control(ns: str, group: str, topic: str, offsets: dict[int, int]) -> tuple[bool, str]:
    """consumer_progress answers for `group` with one row per queue of `topic`, its offsets in them."""
    admin = Admin(namesrv=ns)
    try:
        rows = [r for r in admin.consumer_progress(group) if r["topic"] == topic]
    finally:
        admin.shutdown()
    have = {r["queue_id"]: r["consumer_offset"] for r in rows}
    return have == offsets, f"rows {have}, committed {offsets}"


def open_transactions(ns: str) -> tuple[bool, str]:
    """TRANSACTION_LIST_OPEN answers on every broker."""
    admin = Admin(namesrv=ns)
    try:
        rows = admin.open_transactions()
    finally:
        admin.shutdown()
    return True, f"{sum(len(v) for v in rows.values())} open"
