"""Socket fuzz of the txn-checker (issue 13), and poison transaction properties.

The txn-checker's own socket gets every request code, every field type-confused and out of
range, envelope garbage, oversized frames and path-shaped names. Then half messages whose
properties with system meaning hold what they must not (CHECK_IMMUNITY_TIME_IN_SECONDS=inf,
TRANSACTION_CHECK_TIMES=x, TRAN_BORN_MS in the far future ...) are sent raw and through the
SDK's TransactionProducer: the broker may refuse them at the door (MESSAGE_ILLEGAL), or store
them and the checker must read them defensively. Either way a normal transaction sent after
them is still checked by the txn-checker and committed, TRANSACTION_LIST_OPEN answers, and
the usual checks hold (alive, PING, round trip, canary, memory, replies, nothing outside the
data dir).

Replay a run with QUIVER_FUZZ_SEED=<seed printed in the log>.
"""

import collections
import time

import pytest

from quiver import Message, TransactionProducer, TransactionState
from quiver.wire.codes import RequestCode, ResponseCode
from quiver.errors import QuiverError
from quiver.wire.transport import Transport

from support.fuzz_cluster import Checks, fuzz_env, out  # noqa: F401  (fixtures)
from support.fuzz_controls import open_transactions, txn_control
from support.fuzz_run import FuzzRun

pytestmark = [pytest.mark.slow, pytest.mark.faults]

FAR_FUTURE_MS = str(int(time.time() * 1000) + 10 * 86_400_000)
POISON_PROPERTIES = {
    "CHECK_IMMUNITY_TIME_IN_SECONDS": ["inf", "-inf", "nan", "1e309", "1e20", "x", "", "-1", "9223372036854775807",
                                       "99999999999999999999", "1.5"],
    "TRANSACTION_CHECK_TIMES": ["x", "-1", "1.5", "99999999999999999999", "", "inf", "\u0661"],
    "TRAN_BORN_MS": ["x", "inf", "-1", "9223372036854775807", "99999999999999999999", FAR_FUTURE_MS],
    "TRAN_PREPARED_QUEUE_OFFSET": ["x", "-1", "99999999999999999999"],
    "REAL_QID": ["x", "-1", "99999999999999999999"],
    "TRAN_STATE": ["x", "C", "R"],
}


def _raw_poison(broker_addr: str, rng) -> tuple[collections.Counter, list[str]]:
    """Half messages (sys flag TX_PREPARED) carrying each poison value; returns reply codes and
    the properties the broker stored."""
    codes, stored = collections.Counter(), []
    t = Transport("fuzz-txn-poison")
    try:
        for prop, values in POISON_PROPERTIES.items():
            for value in values:
                txid = f"{rng.getrandbits(128):032X}"
                props = f"UNIQ_KEY\x01{txid}\x02TRAN_MSG\x01true\x02PGROUP\x01poison-pg\x02{prop}\x01{value}\x02"
                ext = {"t": "FuzzTx", "q": 0, "b": int(time.time() * 1000), "g": "poison-pg", "sf": 4,
                       "m": [[0, props]]}
                env = t.call(broker_addr, RequestCode.SEND_MESSAGE, ext, [b"poison"], ok=tuple(ResponseCode))
                codes[f"{ResponseCode(env.code).name}"] += 1
                if env.code == ResponseCode.SUCCESS:
                    stored.append(f"{prop}={value!r}")
    finally:
        t.close()
    return codes, stored


def _sdk_poison(tp) -> collections.Counter:
    codes = collections.Counter()
    for prop, value in (("CHECK_IMMUNITY_TIME_IN_SECONDS", "inf"), ("TRANSACTION_CHECK_TIMES", "x"),
                        ("CHECK_IMMUNITY_TIME_IN_SECONDS", "nan"), ("TRANSACTION_CHECK_TIMES", "-1")):
        try:
            tp.send_in_transaction(Message("FuzzTx", b"sdk-poison", properties={prop: value}),
                                   lambda m, a: TransactionState.UNKNOWN)
            codes["stored"] += 1
        except QuiverError as exc:
            codes[type(exc).__name__] += 1
    return codes


def test_txn_checker_survives_malformed_frames_and_poison_halves(fuzz_env, out):
    env = fuzz_env()
    checks = Checks("txn-checker", out)
    checks.attempt("baseline: a normal transaction is checked and committed", txn_control, env.ns, env.txn.addr)
    run = FuzzRun(env, env.txn, out)
    run.general()
    run.oversized()
    run.paths()
    checks.attempt("control: a normal transaction is checked and committed after the socket fuzz", txn_control,
                   env.ns, env.txn.addr)
    with TransactionProducer("poison-live-pg", namesrv=env.ns,
                             checker=lambda m: TransactionState.UNKNOWN) as tp:  # alive: its halves get checked
        raw, stored = _raw_poison(env.broker.addr, run.rng)
        sdk = _sdk_poison(tp)
        out(f"FUZZ service=txn-checker poison halves: raw {dict(raw)} (stored: {', '.join(stored)}), SDK {dict(sdk)}")
        time.sleep(2.0)  # several check rounds (--check-interval-ms 300) over the poison
        checks.attempt("control: after poison transaction properties a normal transaction is still checked "
                       "and committed", txn_control, env.ns, env.txn.addr)
        checks.attempt("TRANSACTION_LIST_OPEN answers after poison transaction properties", open_transactions,
                       env.ns)
    run.standard_checks(checks)
    checks.assert_all()
