"""A controller-mode cluster spread over network namespaces (tests/support/netns.py): 3 name
servers with --controller (one Raft group), N brokers of one group with --auto-failover, auth on
(the auth dir's server secret keys the controllers' Raft, as in tests/support/failover.py), and
the clients in a namespace of their own that is never cut, so they reach both sides of any cut.
The test process reaches the cluster only through an agent process in that namespace
(support.partition_client). Every process is tracked by PID and killed at stop()."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from quiver.tools.local import ServiceProcess
from quiver.wire.curve import init_auth_dir

from .netns import Net

GROUP = "pg"
CLUSTER = "PartCluster"
NS_PORT, RAFT_PORT, BROKER_PORT, HA_PORT = 9876, 9877, 10911, 10912
TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class NsService(ServiceProcess):
    """A service process started inside a network namespace (`prefix` = ip netns exec <ns>)."""
    prefix: list = field(default_factory=list)
    node: str = ""

    def start(self) -> "NsService":
        os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([*self.prefix, sys.executable, "-m", self.module, "--listen", self.addr,
                                          *self.args], stdout=log, stderr=subprocess.STDOUT,
                                         env={**os.environ, **self.env}, start_new_session=True)
        return self


class PartitionCluster:
    def __init__(self, root: str, brokers: int = 3, broker_args=()):
        self.root = os.path.abspath(root)
        self.net = Net([f"c{i}" for i in (1, 2, 3)] + [f"b{j}" for j in range(1, brokers + 1)] + ["cli"])
        self.auth = os.path.join(self.root, "auth")
        self.creds = os.path.join(self.auth, "admin.key")
        self.services: list[NsService] = []
        self.clients: list[subprocess.Popen] = []
        self.agent: subprocess.Popen | None = None
        self.agent_lock = threading.Lock()
        self.broker_args = list(broker_args)
        self.n_brokers = brokers

    # ---- addresses -----------------------------------------------------------------------------

    @property
    def namesrv(self) -> str:
        return ";".join(f"{self.net.addr[f'c{i}']}:{NS_PORT}" for i in (1, 2, 3))

    def broker_addr(self, node: str) -> str:
        return f"{self.net.addr[node]}:{BROKER_PORT}"

    def node_of(self, addr: str) -> str:
        host = addr.rsplit(":", 1)[0]
        return next(n for n, a in self.net.addr.items() if a == host)

    # ---- start and stop ------------------------------------------------------------------------

    def start(self) -> "PartitionCluster":
        self.net.create()
        init_auth_dir(self.auth)
        peers = ";".join(f"{self.net.addr[f'c{i}']}:{RAFT_PORT}" for i in (1, 2, 3))
        for i in (1, 2, 3):
            node = f"c{i}"
            self._service(node, "quiver_namesrv", NS_PORT, "--controller", "--controller-peers", peers,
                           "--controller-raft", f"{self.net.addr[node]}:{RAFT_PORT}",
                           "--data-dir", os.path.join(self.root, f"controller-{i}"))
        self.agent = subprocess.Popen(self.client_argv("agent"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=open(os.path.join(self.root, "agent.log"), "ab"), text=True,
                                      env=self.client_env(), start_new_session=True)
        self.wait_ping([s.addr for s in self.services])
        for j in range(1, self.n_brokers + 1):
            node = f"b{j}"
            self._service(node, "quiver_broker", BROKER_PORT, "--namesrv", self.namesrv, "--broker-name", GROUP,
                          "--advertise", self.broker_addr(node), "--data-dir", os.path.join(self.root, "broker"),
                          "--cluster", CLUSTER, "--flush", "sync", "--auto-failover", "--broker-id", str(j),
                          "--ha-listen", f"{self.net.addr[node]}:{HA_PORT}", *self.broker_args)
        self.wait_ping([s.addr for s in self.services])
        return self

    def _service(self, node: str, module: str, port: int, *args: str) -> NsService:
        svc = NsService(node, module, f"{self.net.addr[node]}:{port}", list(args),
                        os.path.join(self.root, "logs", f"{node}.log"), module,
                        env={"QUIVER_AUTH_DIR": self.auth}, prefix=self.net.exec_prefix(node), node=node)
        self.services.append(svc.start())
        return svc

    def client_env(self) -> dict:
        return {**os.environ, "PYTHONPATH": os.pathsep.join([TESTS_DIR, os.environ.get("PYTHONPATH", "")])}

    def client_argv(self, role: str, *args: str) -> list[str]:
        return [*self.net.exec_prefix("cli"), sys.executable, "-m", "support.partition_client", role,
                "--namesrv", self.namesrv, "--creds", self.creds, *args]

    def client(self, role: str, *args: str, log: str) -> subprocess.Popen:
        with open(os.path.join(self.root, log), "ab") as f:
            p = subprocess.Popen(self.client_argv(role, *args), stdout=f, stderr=subprocess.STDOUT,
                                 env=self.client_env(), start_new_session=True)
        self.clients.append(p)
        return p

    def stop_clients(self, procs: list[subprocess.Popen], timeout: float = 15.0) -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)

    def stop(self) -> list[str]:
        """Kill every process (by PID) and remove the namespaces; returns what could not be removed."""
        procs = self.clients + ([self.agent] if self.agent else []) + [s.proc for s in self.services if s.proc]
        for p in procs:   # all killed first, then waited for: no process outlives another's wait
            if p.poll() is None:
                p.kill()
        for p in procs:
            p.wait(10)
        return self.net.remove()

    # ---- the agent -----------------------------------------------------------------------------

    def call(self, op: str, **req):
        with self.agent_lock:
            self.agent.stdin.write(json.dumps({"op": op, **req}) + "\n")
            self.agent.stdin.flush()
            line = self.agent.stdout.readline()
        if not line:
            raise RuntimeError(f"the agent exited ({self.agent.poll()}); see {self.root}/agent.log")
        ans = json.loads(line)
        if "error" in ans:
            raise RuntimeError(f"agent {op}: {ans['error']}")
        return ans["ok"]

    def wait_ping(self, addrs: list[str], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            got = self.call("ping", addrs=addrs)
            if all(got.values()):
                return
            dead = [s.name for s in self.services if not s.alive()]
            if dead or time.monotonic() > deadline:
                down = [a for a, ok in got.items() if not ok]
                raise AssertionError(f"not answering PING: {down}; exited: {dead}; logs in {self.root}/logs")
            time.sleep(0.2)

    def group(self) -> dict | None:
        """The controller leader's view of the broker group (master, epoch, sync_state_set)."""
        info = self.call("info")
        return next((g for g in info["groups"] if g["broker_name"] == GROUP), None)

    def leader_node(self) -> str | None:
        leader = self.call("info")["leader"]
        return self.node_of(leader) if leader else None

    def wait_group(self, in_sync: int, timeout: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            g = self.group()
            if g and g["master"] and len(g["sync_state_set"]) >= in_sync:
                return g
            if time.monotonic() > deadline:
                raise AssertionError(f"group not {in_sync} in sync within {timeout} s: {g}")
            time.sleep(0.2)

    def broker_status(self, node: str) -> dict:
        return self.call("status", addr=self.broker_addr(node))

    def wait_topics(self, topic_count_min: int, timeout: float = 30.0) -> None:
        """Every broker knows the master's topics (a new master must not auto-create them again)."""
        deadline = time.monotonic() + timeout
        while True:
            counts = {}
            for j in range(1, self.n_brokers + 1):
                try:
                    counts[j] = self.broker_status(f"b{j}")["topics"]
                except RuntimeError:
                    counts[j] = -1
            if len(set(counts.values())) == 1 and min(counts.values()) >= topic_count_min:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"brokers' topic counts differ after {timeout} s: {counts}")
            time.sleep(0.2)

    def read_back(self, node: str, topic: str, queues: int) -> dict:
        """{queue id: [[offset, id, body], ...]} as the broker on `node` serves them."""
        return {int(q): rows for q, rows in self.call("read", addr=self.broker_addr(node), topic=topic,
                                                      queues=queues).items()}

    def log_bytes(self, node: str) -> bytes:
        d = os.path.join(self.root, "broker", f"{GROUP}-{node[1:]}", "commitlog")
        out = []
        for name in sorted(os.listdir(d)):
            with open(os.path.join(d, name), "rb") as f:
                out.append(f.read())
        return b"".join(out)
