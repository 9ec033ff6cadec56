"""examples/bank_transfer.py: 1,000 transfers with random producer crashes keep the money sum.

Runs on SQLite and on a real PostgreSQL server started here (initdb + pg_ctl in
a temp dir on a free port, as the postgres user when we are root; stopped by PID).
"""

import glob
import importlib.util
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from quiver.tools.local import free_port

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


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))), None)
    return found


@pytest.fixture
def postgres():
    """A throwaway PostgreSQL server: yields a URL prefix 'postgresql+psycopg://postgres@127.0.0.1:PORT/'."""
    pytest.importorskip("psycopg")
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not initdb or not pg_ctl:
        pytest.skip("PostgreSQL is not installed (scripts/bootstrap.sh installs the Debian package)")
    base = tempfile.mkdtemp(prefix="quiver-pg-")
    data = os.path.join(base, "data")
    as_user = []
    if os.geteuid() == 0:  # postgres refuses to run as root
        pw = pwd.getpwnam("postgres")
        os.chown(base, pw.pw_uid, pw.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    port = free_port()
    subprocess.run([*as_user, initdb, "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8"],
                   check=True, capture_output=True, timeout=120)
    opts = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50"
    subprocess.run([*as_user, pg_ctl, "-D", data, "-o", opts, "-l", os.path.join(base, "log"), "-w", "-t", "60",
                    "start"], check=True, capture_output=True, timeout=90)
    with open(os.path.join(data, "postmaster.pid")) as f:
        pid = int(f.readline())
    try:
        import sqlalchemy
        eng = sqlalchemy.create_engine(f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres",
                                       isolation_level="AUTOCOMMIT")
        with eng.connect() as conn:
            conn.exec_driver_sql("CREATE DATABASE bank_a")
            conn.exec_driver_sql("CREATE DATABASE bank_b")
        eng.dispose()
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/"
    finally:
        os.kill(pid, signal.SIGINT)  # fast shutdown
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(base, ignore_errors=True)


def test_bank_transfer_postgres(make_cluster, postgres, tmp_path):
    c = _cluster(make_cluster)
    out = _example().run(c.namesrv, postgres + "bank_a", postgres + "bank_b", transfers=1000, crash_rate=0.01,
                         workdir=str(tmp_path))
    _check(out)
