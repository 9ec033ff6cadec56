"""Socket fuzz of the filter server (issue 13): every request code, every field type-confused and
out of range, SQL92 expressions built to hurt a parser (10,000 nested parentheses, 20,000-item
IN lists, 100 KiB literals), envelope garbage, oversized frames, path-shaped names; then the
process is alive, PING answers, a round trip works, the canary is intact, memory stayed
bounded, and a SQL92 subscription through the filter server still gets exactly its messages.

Replay a run with QUIVER_FUZZ_SEED=<seed printed in the log>.
"""

import itertools
import time

import pytest

from quiver import Message, MessageSelector, Producer, PullConsumer

from support.fuzz_cluster import Checks, fuzz_env, out  # noqa: F401  (fixtures)
from support.fuzz_run import FuzzRun

pytestmark = [pytest.mark.slow, pytest.mark.faults]

_runs = itertools.count()


def _sql_control(ns: str, topic: str = "FuzzSql", timeout: float = 15.0):
    run = f"r{next(_runs)}-{time.monotonic_ns()}"
    msgs = [Message(topic, f"{run}-{i}".encode(), tags=("vip" if i % 7 == 0 else "std"),
                    properties={"run": run, "n": str(i), "region": ["eu", "us", "ap"][i % 3]}) for i in range(60)]
    want = {f"{run}-{i}".encode() for i in range(60) if i >= 20 and i % 3 == 0}
    with Producer("fuzz-sql-pg", namesrv=ns) as p:
        for f in [p.send_async(m) for m in msgs]:
            f.result(15)
    got = []
    with PullConsumer(f"fuzz-sql-{run}", namesrv=ns, consume_from="first") as c:
        c.subscribe(topic, MessageSelector.sql(f"run = '{run}' AND n >= 20 AND region = 'eu'"))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and {m.body for m in got} < want:
            got.extend(c.poll(0.2))
        settle = time.monotonic() + 1.0
        while time.monotonic() < settle:
            got.extend(c.poll(0.1))
    bodies = [m.body for m in got if m.body.startswith(run.encode())]
    ok = sorted(bodies) == sorted(want)
    return ok, f"{len(bodies)} matched of {len(want)} expected" + (
        "" if ok else f"; missing {len(want - set(bodies))}, unexpected {len(set(bodies) - want)}, "
        f"duplicates {len(bodies) - len(set(bodies))}")


def test_filter_survives_malformed_frames(fuzz_env, out):
    env = fuzz_env()
    checks = Checks("filter", out)
    checks.attempt("baseline: a SQL92 subscription gets exactly its messages", _sql_control, env.ns)
    run = FuzzRun(env, env.filter, out)
    run.general()
    run.oversized()
    run.paths()
    run.standard_checks(checks)
    checks.attempt("control: a SQL92 subscription through the filter still gets exactly its messages",
                   _sql_control, env.ns)
    checks.assert_all()
