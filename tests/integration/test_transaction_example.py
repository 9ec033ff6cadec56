"""examples/bank_transfer.py: 1,000 transfers with random producer crashes keep the money sum.

Runs on SQLite and on a real PostgreSQL server started for the test
(tests/support/postgres.py: initdb + pg_ctl in a temp dir, stopped by PID).
"""

import importlib.util
import os

import pytest

from support.postgres import running_postgres

pytestmark = pytest.mark.slow
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECKER = ("--check-interval-ms", "500", "--transaction-timeout-ms", "1000")


def _example():
    spec = importlib.util.spec_from_file_location("bank_transfer", os.path.join(ROOT, "examples", "bank_transfer.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _cluster(make_cluster):
    c = make_cluster()
    c.add_service("txn-checker", "quiver_txn", *CHECKER)
    c.wait()
    return c


def _check(out):
    assert out["open"] == 0, out
    assert out["sum"] == out["expected_sum"], out
    assert out["crashes"] >= 1, out  # the run did exercise crashes
    assert out["bank_a"] < out["expected_sum"] // 2 < out["bank_b"], out


def test_bank_transfer_sqlite(make_cluster, tmp_path):
    c = _cluster(make_cluster)
    out = _example().run(c.namesrv, f"sqlite:///{tmp_path}/a.db", f"sqlite:///{tmp_path}/b.db", transfers=1000,
                         crash_rate=0.01, workdir=str(tmp_path))
    _check(out)


@pytest.fixture
def postgres():
    """A throwaway PostgreSQL server with databases bank_a and bank_b (tests/support/postgres.py)."""
    with running_postgres("bank_a", "bank_b") as prefix:
        yield prefix


def test_bank_transfer_postgres(make_cluster, postgres, tmp_path):
    c = _cluster(make_cluster)
    out = _example().run(c.namesrv, postgres + "bank_a", postgres + "bank_b", transfers=1000, crash_rate=0.01,
                         workdir=str(tmp_path))
    _check(out)
