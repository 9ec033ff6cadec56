"""Start the peer servers (NATS JetStream, Redis, RabbitMQ + epmd) on 127.0.0.1, stop them by PID.

Owns: installing the Debian packages when absent, each server's command line
and durability settings, waiting for the port with a deadline, and stopping the
process (and only its own process group) afterwards. Does not own any client
code: the drivers in bench/peers/<system>.py connect to the port given here.

Durability, as compared in the results:
- nats-server 2.9 `-js` file storage: acks before fsync (2.9 has no sync_interval).
- redis-server `--appendonly yes --appendfsync everysec`: replies before the fsync.
- rabbitmq-server: durable classic queue + persistent messages + publisher
  confirms (the driver's side); confirms follow an fsync grouped over messages.
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from quiver.tools.local import free_port

PACKAGES = {"nats-server": "nats-server", "redis-server": "redis-server", "rabbitmq-server": "rabbitmq-server"}
RABBIT_BIN = "/usr/lib/rabbitmq/bin/rabbitmq-server"   # the script itself: the wrapper would `su` to another user
POLICY_RC = "/usr/sbin/policy-rc.d"


def ensure_packages(names: list[str], log=print) -> None:
    """apt-get install the Debian packages that are missing, with no service auto-started."""
    missing = [PACKAGES[n] for n in names if not _installed(n)]
    if not missing:
        return
    if not os.path.exists(POLICY_RC):          # exit 101 = "do not start services"
        with open(POLICY_RC, "w") as f:
            f.write("#!/bin/sh\nexit 101\n")
        os.chmod(POLICY_RC, 0o755)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    log(f"installing {' '.join(missing)} with apt-get (no service is started)")
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing],
                   check=True, env=env, stdout=subprocess.DEVNULL)


def _installed(name: str) -> bool:
    return os.path.exists(RABBIT_BIN) if name == "rabbitmq-server" else shutil.which(name) is not None


def wait_port(port: int, proc: subprocess.Popen, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening on {port}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout_s} s")
        time.sleep(0.1)


def stop_pid(proc: subprocess.Popen | None, timeout_s: float = 15.0) -> None:
    """SIGTERM the process we started, SIGKILL on timeout, then its own session's leftovers."""
    if proc is None:
        return
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    try:   # started with start_new_session: the group id is our child's PID, so this reaches only its helpers
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class Server:
    """One peer server process with its data in a temp dir; a context manager."""

    name = ""
    start_timeout_s = 30.0

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix=f"quiver-bench-{self.name}-")
        self.port = free_port()
        self.procs: list[subprocess.Popen] = []

    def _spawn(self, argv: list[str], env: dict | None = None, log: str = "server.log") -> subprocess.Popen:
        with open(os.path.join(self.dir, log), "ab") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env={**os.environ, **(env or {})}, start_new_session=True, cwd=self.dir)
        self.procs.append(proc)
        return proc

    def start(self) -> "Server":
        raise NotImplementedError

    def stop(self) -> None:
        for proc in reversed(self.procs):      # the server first, then epmd
            stop_pid(proc)
        self.procs.clear()
        shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, n: int = 30) -> str:
        try:
            with open(os.path.join(self.dir, "server.log"), "rb") as f:
                return b"".join(f.readlines()[-n:]).decode(errors="replace")
        except OSError:
            return ""

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc):
        self.stop()


class NatsServer(Server):
    name = "nats"

    def start(self):
        proc = self._spawn(["nats-server", "-js", "-sd", os.path.join(self.dir, "js"),
                            "-a", "127.0.0.1", "-p", str(self.port)])
        wait_port(self.port, proc, self.start_timeout_s, "nats-server")
        return self


class RedisServer(Server):
    name = "redis"

    def start(self):
        proc = self._spawn(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                            "--dir", self.dir, "--appendonly", "yes", "--appendfsync", "everysec",
                            "--save", "", "--daemonize", "no", "--protected-mode", "yes"])
        wait_port(self.port, proc, self.start_timeout_s, "redis-server")
        return self


class RabbitServer(Server):
    """RabbitMQ needs epmd: we start our own in the foreground on a free port, so we own its PID."""

    name = "rabbitmq"
    start_timeout_s = 90.0

    def start(self):
        epmd_port, dist_port = free_port(), free_port()
        env = {"ERL_EPMD_PORT": str(epmd_port), "ERL_EPMD_ADDRESS": "127.0.0.1", "HOME": self.dir}
        epmd = self._spawn(["epmd", "-port", str(epmd_port), "-address", "127.0.0.1"], env, "epmd.log")
        wait_port(epmd_port, epmd, 10, "epmd")
        d = self.dir
        env.update({
            "RABBITMQ_NODENAME": f"bench{self.port}@localhost", "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port), "RABBITMQ_DIST_PORT": str(dist_port),
            "RABBITMQ_MNESIA_BASE": os.path.join(d, "mnesia"), "RABBITMQ_LOG_BASE": os.path.join(d, "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": os.path.join(d, "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": os.path.join(d, "rabbitmq"), "RABBITMQ_CONF_ENV_FILE": os.path.join(d, "env.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": os.path.join(d, "advanced.config"),
            "RABBITMQ_PID_FILE": os.path.join(d, "rabbit.pid"), "RABBITMQ_USE_LONGNAME": "false",
        })
        with open(os.path.join(d, "enabled_plugins"), "w") as f:
            f.write("[].\n")
        with open(os.path.join(d, "rabbitmq.conf"), "w") as f:
            f.write("loopback_users = none\nlisteners.tcp.1 = 127.0.0.1:%d\n" % self.port)
        proc = self._spawn([RABBIT_BIN], env)
        wait_port(self.port, proc, self.start_timeout_s, "rabbitmq-server")
        return self


SERVERS = {"jetstream": NatsServer, "redis": RedisServer, "rabbitmq": RabbitServer}
