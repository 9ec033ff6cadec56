"""A throwaway PostgreSQL server for tests: initdb + pg_ctl in a temp dir on a free port.

    with running_postgres("db_a", "db_b") as prefix:   # 'postgresql+psycopg://postgres@127.0.0.1:PORT/'
        create_engine(prefix + "db_a")
        create_databases(prefix, "db_c")                 # more, later (one server, a database per test)

Runs as the `postgres` user when we are root (PostgreSQL refuses root), trusts local
connections, fsync off. Stopped by PID (fast shutdown, then SIGKILL after 30 s) and its
directory removed, whatever the test did. Skips the test when psycopg or the server
binaries (Debian's postgresql package; scripts/bootstrap.sh installs it) are missing.
"""

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from quiver.tools.local import free_port


def pg_bin(name: str) -> str | None:
    return shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))), None)


@contextlib.contextmanager
def running_postgres(*databases: str, max_connections: int = 50):
    """Yield the URL prefix of a new server where `databases` exist (and `postgres`)."""
    pytest.importorskip("psycopg")
    initdb, pg_ctl = pg_bin("initdb"), pg_bin("pg_ctl")
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
    pid = None
    try:
        subprocess.run([*as_user, initdb, "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8"],
                       check=True, capture_output=True, timeout=120)
        opts = (f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off "
                f"-c max_connections={max_connections}")
        subprocess.run([*as_user, pg_ctl, "-D", data, "-o", opts, "-l", os.path.join(base, "log"), "-w", "-t", "60",
                        "start"], check=True, capture_output=True, timeout=90)
        with open(os.path.join(data, "postmaster.pid")) as f:
            pid = int(f.readline())
        prefix = f"postgresql+psycopg://postgres@127.0.0.1:{port}/"
        create_databases(prefix, *databases)
        yield prefix
    finally:
        if pid is not None:
            _stop(pid)
        shutil.rmtree(base, ignore_errors=True)


def create_databases(prefix: str, *databases: str) -> None:
    """CREATE DATABASE each of `databases` on the server at `prefix` (running_postgres's URL prefix)."""
    if not databases:
        return
    import sqlalchemy
    eng = sqlalchemy.create_engine(prefix + "postgres", isolation_level="AUTOCOMMIT")
    try:
        with eng.connect() as conn:
            for db in databases:
                conn.exec_driver_sql(f'CREATE DATABASE "{db}"')
    finally:
        eng.dispose()


def _stop(pid: int) -> None:
    os.kill(pid, signal.SIGINT)  # fast shutdown
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
