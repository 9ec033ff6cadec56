"""Socket fuzz of the scheduler (issue 13): every request code, every field type-confused and
out of range, envelope garbage, oversized frames and path-shaped names on its listen socket;
then delayed messages whose scheduling properties are poison (DELAY=x, TIMER_DELIVER_MS=inf,
REAL_QID=-1 ...; the broker may refuse them with MESSAGE_ILLEGAL or store them for the
scheduler to read defensively). After all that the process is alive, PING answers, a
send/pull round trip works, the canary is intact, memory stayed bounded, and a delay-level-1
message is still delivered within 2 s.

Replay a run with QUIVER_FUZZ_SEED=<seed printed in the log>.
"""

import collections
import time

import pytest

from quiver.wire.codes import RequestCode, ResponseCode
from quiver.wire.transport import Transport

from support.fuzz_cluster import Checks, fuzz_env, out  # noqa: F401  (fixtures)
from support.fuzz_controls import delay_control
from support.fuzz_run import FuzzRun

pytestmark = [pytest.mark.slow, pytest.mark.faults]


def _cancel_answers(addr: str):
    t = Transport("fuzz-cancel")
    try:
        env = t.call(addr, RequestCode.SCHEDULE_CANCEL, {"id": "0" * 32, "t": "FuzzT"}, ok=(0, 22))
        return True, f"code {env.code} {env.remark!r} {env.ext}"
    finally:
        t.close()


POISON_SCHEDULING = {
    "DELAY": ["x", "-1", "1.5", "inf", "99999999999999999999", "\u0661", ""],
    "TIMER_DELIVER_MS": ["x", "inf", "nan", "-1", "9223372036854775807", "99999999999999999999", "1e20", "1.5"],
    "REAL_QID": ["x", "-1", "99999999999999999999", "1.5"],
    "REAL_TOPIC": ["", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "%DLQ%x", "a b"],
    "SCHEDULE_DUE_MS": ["x", "inf", "9223372036854775807"],
    "TIMER_DELAY_SEC": ["x", "inf", "-1"],
}


def _poison_delayed(broker_addr: str, rng):
    """Delayed / timed sends whose scheduling properties are poison; returns reply codes and what was stored."""
    codes, stored = collections.Counter(), []
    t = Transport("fuzz-sched-poison")
    try:
        for prop, values in POISON_SCHEDULING.items():
            for value in values:
                props = f"UNIQ_KEY\x01{rng.getrandbits(128):032X}\x02{prop}\x01{value}\x02"
                if prop not in ("DELAY", "TIMER_DELIVER_MS"):
                    props += "DELAY\x011\x02"
                ext = {"t": "FuzzDelay", "q": 0, "b": int(time.time() * 1000), "g": "poison-pg", "m": [[0, props]]}
                env = t.call(broker_addr, RequestCode.SEND_MESSAGE, ext, [b"poison"], ok=tuple(ResponseCode))
                codes[ResponseCode(env.code).name] += 1
                if env.code == ResponseCode.SUCCESS:
                    stored.append(f"{prop}={value!r}")
    finally:
        t.close()
    return codes, stored


def test_scheduler_survives_malformed_frames(fuzz_env, out):
    env = fuzz_env()
    checks = Checks("scheduler", out)
    checks.attempt("baseline before the fuzz: delay-level-1 message within 2 s", delay_control, env.ns)
    run = FuzzRun(env, env.scheduler, out)
    run.general()
    run.oversized()
    run.paths()
    checks.attempt("control: delay-level-1 message still delivered within 2 s after the socket fuzz",
                   delay_control, env.ns)
    codes, stored = _poison_delayed(env.broker.addr, run.rng)
    out(f"FUZZ service=scheduler poison delayed messages: {dict(codes)} (stored: {', '.join(stored)})")
    time.sleep(2.0)  # the level-1 ones are due: the scheduler reads them back
    run.standard_checks(checks)
    checks.attempt("control: delay-level-1 message still delivered within 2 s after poison scheduling "
                   "properties", delay_control, env.ns)
    checks.attempt("SCHEDULE_CANCEL still answers", _cancel_answers, env.scheduler.addr)
    checks.assert_all()
