"""Run Quiver services as local processes on loopback: `quiver up` and the tests.

Each service is `python -m <package>` with flags, its own port and data dir,
logs in <data>/logs/<name>.log. Health is a PING on the service's port with
a deadline (never a bare sleep). Processes are stopped by PID.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

from quiver.wire import requests as rq
from quiver.errors import QuiverError
from quiver.wire.curve import read_credentials
from quiver.wire.transport import Transport


_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback port free now and not handed out before by this process: two services given the
    same port before either binds it collide (a slave once dialled another broker as its master's
    HA port)."""
    if len(_handed_out) > 16_000:   # most of the ephemeral range: start over rather than loop
        _handed_out.clear()
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


@dataclass
class ServiceProcess:
    name: str
    module: str
    addr: str
    args: list[str]
    log_path: str
    role: str = ""
    proc: subprocess.Popen | None = None
    env: dict = field(default_factory=dict)
    url: str = ""   # a service with web pages (the console): where a browser opens them

    def start(self) -> "ServiceProcess":
        os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
        log = open(self.log_path, "ab")
        env = {**os.environ, **self.env}
        self.proc = subprocess.Popen([sys.executable, "-m", self.module, "--listen", self.addr, *self.args],
                                     stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        log.close()
        return self

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else 0

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig=signal.SIGKILL) -> None:
        if self.alive():
            os.kill(self.proc.pid, sig)
            self.proc.wait(10)

    def stop(self, timeout: float = 10.0) -> None:
        if not self.alive():
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def log_tail(self, n: int = 40) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return b"".join(f.readlines()[-n:]).decode(errors="replace")
        except OSError:
            return ""


def ping(transport: Transport, addr: str, timeout: float = 0.5) -> dict | None:
    try:
        return transport.call(addr, rq.Ping(), timeout=timeout).ext
    except QuiverError:
        return None


def wait_healthy(services, timeout: float = 30.0, credentials=None) -> None:
    """PING every service until it answers or the deadline passes (then raise with its log)."""
    t = Transport("health", credentials=credentials)
    try:
        deadline = time.monotonic() + timeout
        for svc in services:
            while ping(t, svc.addr) is None:
                if not svc.alive():
                    raise RuntimeError(f"{svc.name} exited with {svc.proc.returncode}:\n{svc.log_tail()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{svc.name} did not answer PING on {svc.addr} in {timeout} s:\n{svc.log_tail()}")
                time.sleep(0.05)
    finally:
        t.close()


class LocalCluster:
    """Name servers + brokers (+ later services) on loopback, data under `data_dir`."""

    def __init__(self, data_dir: str, host: str = "127.0.0.1", auth_dir: str | None = None):
        self.data_dir = os.path.abspath(data_dir)
        self.host = host
        self.services: list[ServiceProcess] = []
        # auth on: every service gets the auth dir, and health checks use its admin key
        self.auth_dir = os.path.abspath(auth_dir) if auth_dir else None
        self.credentials = read_credentials(os.path.join(self.auth_dir, "admin.key")) if self.auth_dir else None

    def start_service(self, svc: ServiceProcess) -> ServiceProcess:
        """Start `svc` as part of this cluster (with the auth dir, when auth is on)."""
        if self.auth_dir:
            svc.env["QUIVER_AUTH_DIR"] = self.auth_dir
        return svc.start()

    def _addr(self, port: int | None) -> str:
        return f"{self.host}:{port or free_port()}"

    @property
    def namesrv(self) -> str:
        return ";".join(s.addr for s in self.services if s.role == "namesrv")

    def add_core(self, brokers: int = 1) -> None:
        """One name server and `brokers` brokers, healthy and registered (what most tools start first)."""
        self.add_namesrv()
        self.wait()
        for _ in range(brokers):
            self.add_broker()
        self.wait()
        self.wait_registered(brokers)

    def add_namesrv(self, port: int | None = None, *extra: str) -> ServiceProcess:
        n = sum(s.role == "namesrv" for s in self.services)
        svc = ServiceProcess(f"namesrv-{n}", "quiver_namesrv", self._addr(port), list(extra),
                             os.path.join(self.data_dir, "logs", f"namesrv-{n}.log"), "namesrv")
        self.services.append(self.start_service(svc))
        return svc

    def add_controller(self, raft: str, peers: list[str], *extra: str, port: int | None = None) -> ServiceProcess:
        """A name server that also runs the failover controller: Raft on `raft`, one of `peers`."""
        n = sum(s.role == "namesrv" for s in self.services)
        key = () if self.auth_dir else ("--controller-key-file", self.controller_key())
        return self.add_namesrv(port, "--controller", "--controller-peers", ";".join(peers), "--controller-raft",
                                raft, "--data-dir", os.path.join(self.data_dir, f"controller-{n}"), *key, *extra)

    def controller_key(self) -> str:
        """Auth off: the controllers' shared Raft key file (made once, under data_dir)."""
        from quiver.tools.cli_auth import write_controller_key
        path = os.path.join(self.data_dir, "controller.key")
        if not os.path.exists(path):
            os.makedirs(self.data_dir, exist_ok=True)
            write_controller_key(path)
        return path

    def add_controllers(self, count: int = 3, *extra: str) -> list[ServiceProcess]:
        """`count` name servers forming one controller Raft group (3 tolerate one failure)."""
        peers = [self._addr(None) for _ in range(count)]
        return [self.add_controller(raft, peers, *extra) for raft in peers]

    def add_auto_broker(self, name: str, member: int, *extra: str, port: int | None = None) -> ServiceProcess:
        """A broker of group `name` with --auto-failover: the controllers (the name servers) pick its role.
        `member` (>= 1) keeps its data directory apart from the group's other members."""
        return self.add_broker(port, name, "--auto-failover", "--broker-id", str(member),
                               "--ha-listen", self._addr(None), *extra, svc_name=f"{name}-m{member}")

    def add_broker(self, port: int | None = None, name: str | None = None, *extra: str,
                   svc_name: str | None = None) -> ServiceProcess:
        n = sum(s.role == "broker" for s in self.services)
        name = name or f"broker-{chr(ord('a') + n)}"
        addr = self._addr(port)
        args = ["--namesrv", self.namesrv, "--broker-name", name, "--advertise", addr,
                "--data-dir", os.path.join(self.data_dir, "broker"), *extra]
        svc_name = svc_name or name
        svc = ServiceProcess(svc_name, "quiver_broker", addr, args,
                             os.path.join(self.data_dir, "logs", f"{svc_name}.log"), "broker")
        self.services.append(self.start_service(svc))
        return svc

    def add_master(self, port: int | None = None, name: str | None = None, role: str = "ASYNC_MASTER",
                   *extra: str) -> ServiceProcess:
        """A broker with --broker-id 0, `role` and its HA socket on a free port."""
        return self.add_broker(port, name, "--role", role, "--ha-listen", self._addr(None), *extra)

    def add_slave(self, master: ServiceProcess, *extra: str, broker_id: int = 1,
                  port: int | None = None) -> ServiceProcess:
        """A slave of `master`'s broker name: --broker-id N --role SLAVE, its own data sub-directory.
        It learns the master's HA address from the name servers."""
        name = master.args[master.args.index("--broker-name") + 1]
        addr = self._addr(port)
        args = ["--namesrv", self.namesrv, "--broker-name", name, "--broker-id", str(broker_id), "--role", "SLAVE",
                "--advertise", addr, "--data-dir", os.path.join(self.data_dir, "broker"), *extra]
        svc = ServiceProcess(f"{name}-s{broker_id}", "quiver_broker", addr, args,
                             os.path.join(self.data_dir, "logs", f"{name}-s{broker_id}.log"), "broker")
        self.services.append(self.start_service(svc))
        return svc

    def add_service(self, role: str, module: str, *extra: str, port: int | None = None,
                    name: str | None = None, data: bool = True) -> ServiceProcess:
        """Any other service (scheduler, txn-checker, filter ...) pointed at the name servers."""
        n = sum(s.role == role for s in self.services)
        name = name or f"{role}-{n}"
        args = ["--namesrv", self.namesrv, *extra]
        if data:
            args += ["--data-dir", os.path.join(self.data_dir, role, name)]
        svc = ServiceProcess(name, module, self._addr(port), args,
                             os.path.join(self.data_dir, "logs", f"{name}.log"), role)
        self.services.append(self.start_service(svc))
        return svc

    def add_console(self, *extra: str, http_port: int | None = None, env: dict | None = None) -> ServiceProcess:
        """The web console (quiver_console) over this cluster's name servers; its pages at `svc.url`.
        `env` for what should not show in `ps` (QUIVER_ADMIN_TOKEN)."""
        n = sum(s.role == "console" for s in self.services)
        http = self._addr(http_port)
        svc = ServiceProcess(f"console-{n}", "quiver_console", self._addr(None),
                             ["--namesrv", self.namesrv, "--http-listen", http, *extra],
                             os.path.join(self.data_dir, "logs", f"console-{n}.log"), "console",
                             env=dict(env or {}), url=f"http://{http}/")
        self.services.append(self.start_service(svc))
        return svc

    def add_proxy(self, *extra: str, grpc_port: int | None = None) -> ServiceProcess:
        """The gRPC proxy (quiver_proxy) for RocketMQ 5 clients; their endpoints are `svc.url` (host:port)."""
        n = sum(s.role == "proxy" for s in self.services)
        grpc_addr = self._addr(grpc_port)
        svc = ServiceProcess(f"proxy-{n}", "quiver_proxy", self._addr(None),
                             ["--namesrv", self.namesrv, "--grpc-listen", grpc_addr, *extra],
                             os.path.join(self.data_dir, "logs", f"proxy-{n}.log"), "proxy", url=grpc_addr)
        self.services.append(self.start_service(svc))
        return svc

    def restart(self, svc: ServiceProcess) -> ServiceProcess:
        svc.stop()
        svc.start()
        wait_healthy([svc], credentials=self.credentials)
        return svc

    def wait(self, timeout: float = 30.0) -> None:
        wait_healthy(self.services, timeout, self.credentials)

    def wait_registered(self, brokers: int, timeout: float = 60.0) -> None:
        """Until every name server lists `brokers` live brokers. The deadline covers a first
        registration lost on a loaded machine: a broker sends the next one a register interval
        (30 s) later. A timeout shows the brokers' logs."""
        t = Transport("health", credentials=self.credentials)
        try:
            deadline = time.monotonic() + timeout
            for ns in [s for s in self.services if s.role == "namesrv"]:
                while True:
                    try:
                        env = t.call(ns.addr, rq.GetClusterInfo(), timeout=1.0)
                        if len(rq.ClusterReply.decode(env.ext).cluster.live) >= brokers:
                            break
                    except QuiverError:
                        pass
                    if time.monotonic() > deadline:
                        logs = "".join(f"\n--- {b.name}:\n{b.log_tail(10)}" for b in self.services
                                       if b.role == "broker")
                        raise RuntimeError(f"{brokers} brokers did not register with {ns.addr} in {timeout} s{logs}")
                    time.sleep(0.05)
        finally:
            t.close()

    def stop(self) -> None:
        for svc in reversed(self.services):
            svc.stop()

    def describe(self) -> list[dict]:
        return [{"name": s.name, "role": s.role, "addr": s.addr, "pid": s.pid, "log": s.log_path,
                 "metrics": s.env.get("QUIVER_METRICS_LISTEN", ""), "url": s.url} for s in self.services]

    def write_state(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump({"namesrv": self.namesrv, "services": self.describe()}, f, indent=2)
