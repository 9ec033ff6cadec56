"""The controller's Raft port against a hostile peer (real name server processes; auth off, where
pysyncobj once unpickled the first frame of anyone, and auth on, where a 2^31-1 length prefix
once made the leader buffer 117 MiB before authenticating and lose leadership): a frame that would run a command,
plain or sealed with the cluster's own Raft key, runs nothing; a 2^31-1 length prefix is refused
before its body is buffered (the process stays small); idle half-frames from many connections
change nothing and are dropped after a few seconds; meanwhile routes are served and the controller stays leader. A name server with
--controller and no key does not start."""

import os
import pickle
import socket
import struct
import subprocess
import sys
import time
import zlib
from types import SimpleNamespace

import pytest
from pysyncobj.encryptor import getEncryptor

from quiver import Admin
from quiver.tools.local import LocalCluster, free_port
from quiver.wire import requests as rq
from quiver.wire.codes import RequestCode
from quiver.wire.curve import init_auth_dir
from quiver.wire.transport import Transport
from quiver_namesrv.raft_key import raft_password

pytestmark = pytest.mark.timeout(300)

TOPIC = "RaftPortCanary"


class RunsCommand:
    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return os.system, (f"touch {self.path}",)


def _frame(body: bytes) -> bytes:
    return struct.pack("i", len(body)) + body


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def _closed_by_peer(sock: socket.socket, timeout: float = 10.0) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


@pytest.fixture(params=["auth-off", "auth-on"])
def cluster(tmp_path, request):
    """(cluster, the controller, its Raft address, the Raft key): auth off, the key file the
    cluster made; auth on, the key derived from the auth dir."""
    auth = None
    if request.param == "auth-on":
        auth = str(tmp_path / "auth")
        init_auth_dir(auth)
    c = LocalCluster(str(tmp_path / "c"), auth_dir=auth)
    try:
        (ctl,) = c.add_controllers(1)
        c.wait()
        c.add_broker()
        c.wait()
        c.wait_registered(1)
        with Admin(namesrv=c.namesrv, credentials=c.credentials) as admin:
            admin.create_topic(TOPIC, queues=2)
        key = raft_password(SimpleNamespace(controller_key_file="" if auth else c.controller_key(), auth_dir=auth))
        yield c, ctl, ctl.args[ctl.args.index("--controller-raft") + 1], key
    finally:
        c.stop()


def _served(t: Transport, ns: str) -> float:
    """Seconds one route lookup took (it must name the canary's queues)."""
    t0 = time.monotonic()
    route = t.call(ns, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}, timeout=5.0).ext["route"]
    assert route["queues"], route
    return time.monotonic() - t0


def _leader(t: Transport, ns: str) -> bool:
    return rq.ReplicaInfoReply.decode(t.call(ns, rq.ReplicaInfo(), timeout=5.0).ext).leader


def test_hostile_frames_run_nothing_buffer_nothing_and_routes_stay_served(cluster, tmp_path):
    c, ctl, raft, key = cluster
    host, port = raft.rsplit(":", 1)
    t = Transport("raft-attack", credentials=c.credentials)
    try:
        deadline = time.monotonic() + 30
        while not _leader(t, ctl.addr):
            assert time.monotonic() < deadline, "the controller never led"
            time.sleep(0.2)
        _served(t, ctl.addr)
        rss0 = _rss_kb(ctl.pid)

        # 1. the frame that once ran a shell command as the name server's user, plain
        plain = tmp_path / "pwned-plain"
        with socket.create_connection((host, int(port))) as s:
            s.sendall(_frame(zlib.compress(pickle.dumps(RunsCommand(plain), protocol=2))))
            assert _closed_by_peer(s), "the Raft port kept a connection that sent an unauthenticated frame"

        # 2. the same frame sealed with the cluster's own key (a key holder): still no code runs
        sealed = tmp_path / "pwned-sealed"
        token = getEncryptor(key).encrypt_at_time(zlib.compress(pickle.dumps(RunsCommand(sealed), protocol=2)),
                                                  int(time.monotonic()))
        with socket.create_connection((host, int(port))) as s:
            s.sendall(_frame(token))
            assert _closed_by_peer(s), "the Raft port kept a connection after a frame it must refuse"

        # 3. a length prefix of 2^31-1, then junk: refused on the prefix, nothing buffered
        sent = 0
        with socket.create_connection((host, int(port))) as s:
            s.settimeout(10)
            chunk = os.urandom(1 << 20)
            try:
                s.sendall(struct.pack("i", 2**31 - 1))
                while sent < (256 << 20):
                    s.sendall(chunk)
                    sent += len(chunk)
            except (BrokenPipeError, ConnectionResetError):
                pass
        assert sent < (32 << 20), f"the Raft port took {sent >> 20} MiB of a frame it could not authenticate"

        # 4. many connections each holding an unfinished small frame (as much as is allowed before auth)
        idle = []
        for _ in range(50):
            s = socket.create_connection((host, int(port)))
            s.sendall(struct.pack("i", 4000) + b"\0" * 3000)
            idle.append(s)
        took = [_served(t, ctl.addr) for _ in range(10)]
        dropped = sum(_closed_by_peer(s, timeout=10.0) for s in idle)  # strangers get a few seconds, then go
        for s in idle:
            s.close()

        time.sleep(1.0)  # anything that would run has run
        assert not plain.exists() and not sealed.exists(), "a Raft frame ran a command"
        assert ctl.alive()
        rss1 = _rss_kb(ctl.pid)
        print(f"name server RSS {rss0} -> {rss1} kB; {sent >> 20} MiB accepted of the 2^31-1 frame; "
              f"route lookups during the idle connections: max {max(took) * 1000:.0f} ms")
        assert rss1 - rss0 < 30_000, f"RSS grew {rss0} -> {rss1} kB"
        assert max(took) < 3.0, took
        assert dropped == len(idle), f"{len(idle) - dropped} idle strangers still connected"
        assert _leader(t, ctl.addr), "the controller lost leadership to a hostile peer"
        _served(t, ctl.addr)
    finally:
        t.close()


def test_a_controller_without_a_key_does_not_start(tmp_path):
    port = free_port()
    raft = f"127.0.0.1:{free_port()}"
    out = subprocess.run([sys.executable, "-m", "quiver_namesrv", "--listen", f"127.0.0.1:{port}", "--controller",
                          "--controller-peers", raft, "--controller-raft", raft, "--data-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "Raft key" in out.stdout + out.stderr and "quiver auth controller-key" in out.stdout + out.stderr
