"""What every system's driver shares: the driver interface, latency stats, pacing, child processes.

Owns: `System` (the interface bench/__main__.py drives), percentile maths, the
fixed-rate pacing loop of the e2e producer, and the child processes that run
concurrent producers and the e2e consumer (bench/peers/worker.py), stopped by PID.
Does not own any client library code nor any server process.
"""

import json
import os
import select
import subprocess
import sys
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WINDOW = 1000


def stat_cpu_s(path: str) -> float:
    """User + system CPU seconds from a /proc stat file (a process's or one thread's)."""
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (every thread)."""
    return stat_cpu_s(f"/proc/{pid}/stat")


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def acked(future, timeout_s: float = 120.0) -> int:
    """1 if a send's future ends in a receipt, 0 if it fails (a pipelined run counts its acks)."""
    try:
        future.result(timeout_s)
        return 1
    except Exception:
        return 0


def latency_stats(lat_s: list[float], prefix: str) -> dict:
    """p50/p99/max in microseconds of a list of seconds."""
    if not lat_s:
        raise RuntimeError(f"{prefix}: no latency samples")
    lat = sorted(lat_s)
    return {f"{prefix}_p50_us": lat[len(lat) // 2] * 1e6,
            f"{prefix}_p99_us": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e6,
            f"{prefix}_max_us": lat[-1] * 1e6}


def percentiles(lat_s: list[float]) -> dict:
    """What an e2e consumer reports, OpenMessaging Benchmark's way: count, p50/p99/p99.9 in µs."""
    lat = sorted(lat_s)
    at = (lambda q: lat[min(len(lat) - 1, int(len(lat) * q))] * 1e6) if lat else (lambda q: None)
    return {"count": len(lat), "p50_us": at(0.5), "p99_us": at(0.99), "p999_us": at(0.999)}


def paced_runs(rate: int, n: int, send_many) -> None:
    """Call send_many(k) with the k messages due so far, n in all at `rate` per second: for a
    client whose send waits for its server, a send that falls behind catches up in one
    pipelined run instead of lowering the rate."""
    t0, sent = time.perf_counter(), 0
    while sent < n:
        due = min(n, int((time.perf_counter() - t0) * rate) + 1)
        if due > sent:
            send_many(due - sent)
            sent = due
        else:
            time.sleep(max(0.0, t0 + sent / rate - time.perf_counter()))


def paced(rate: int, n: int, send, pump=None) -> None:
    """Call send(i) for i in range(n) at `rate` per second; `pump()` runs while waiting (client I/O)."""
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            delay = t0 + i / rate - time.perf_counter()
            if delay <= 0:
                break
            if pump is not None:
                pump(min(delay, 0.002))
            else:
                time.sleep(delay)
        send(i)


class System:
    """One system under test. Subclasses start their server in __enter__ and stop it in __exit__."""

    name = ""
    durability = ""
    notes: dict[str, str] = {}      # workload -> why N/A or what stands in for it
    warm_up = True                  # runner produces 1000 untimed messages first (routes, connections, files)

    def conn(self) -> dict:
        """What a worker process needs to connect (JSON-able)."""
        raise NotImplementedError

    def produce(self, n: int, size: int) -> dict:
        raise NotImplementedError

    def batch(self, n: int) -> dict | None:
        return None

    def consume(self, n: int) -> dict:
        raise NotImplementedError

    def sync(self, samples: int) -> dict:
        raise NotImplementedError

    def e2e(self, rate: int, seconds: float) -> dict:
        raise NotImplementedError

    def scale(self, n: int) -> dict | None:
        """A store of `n` messages: memory, cold reads, recovery (Quiver's own: bench.scale)."""
        return None

    def new_topic(self) -> str:
        """A fresh topic/stream/queue for one concurrent-producer round."""
        return unique("procs")

    def drop_topic(self, topic: str) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


def one_broker(data_dir: str, *broker_args: str, **cluster_kw):
    """A started quiver.tools.local.LocalCluster: one name server, one broker (`broker_args`: its
    settings) registered with it; stopped again if it does not start."""
    from quiver.tools.local import LocalCluster
    cluster = LocalCluster(data_dir, **cluster_kw)
    try:
        cluster.add_namesrv()
        cluster.wait()
        cluster.add_broker(None, None, *broker_args)
        cluster.wait()
        cluster.wait_registered(1)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def timed_produce(client, topic: str, n: int, size: int) -> dict:
    """msg/s of a client's pipelined `produce(topic, n, size)` (which returns the acked count),
    after 10 untimed ones (routes, metadata, connections); every message must be acked."""
    client.produce(topic, 10, size)
    t0 = time.perf_counter()
    acked = client.produce(topic, n, size)
    if acked != n:
        raise RuntimeError(f"{acked} of {n} sends acked")
    return {"msgs_s": acked / (time.perf_counter() - t0)}


class GatewaySystem(System):
    """A name server and one broker on loopback with a gateway in front (`add_gateway`), the
    Quiver Admin that makes each fresh topic (4 queues), and `client_class(conn())` to produce."""

    tmp_prefix = "quiver-bench-"
    client_class = None

    def add_gateway(self, cluster) -> None:
        raise NotImplementedError

    def __enter__(self):
        import contextlib
        import tempfile

        from quiver import Admin
        from quiver.tools.local import LocalCluster
        with contextlib.ExitStack() as stack:      # a failed start undoes what it started
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix=self.tmp_prefix))
            self.cluster = LocalCluster(tmp)
            stack.callback(self.cluster.stop)
            self.cluster.add_core()
            self.add_gateway(self.cluster)
            self.cluster.wait()
            self.admin = Admin(namesrv=self.cluster.namesrv)
            stack.callback(self.admin.shutdown)
            self.client = self.client_class(self.conn())
            stack.callback(self.client.close)
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc):
        self._stack.close()

    def new_topic(self) -> str:
        topic = unique("T")
        self.admin.create_topic(topic, queues=4)
        return topic

    def produce(self, n: int, size: int) -> dict:
        return timed_produce(self.client, self.new_topic(), n, size)


# ---- child processes ------------------------------------------------------------------

def stop(proc: subprocess.Popen) -> None:
    """Kill a child by its PID unless it has ended, reap it and close its pipes."""
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)
    for f in (proc.stdin, proc.stdout):
        if f is not None:
            try:
                f.close()
            except OSError:
                pass


class Child:
    """`python -m bench.peers.worker ...` speaking line-wise on stdin/stdout; killed by PID."""

    def __init__(self, system: str, role: str, params: dict):
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.peers.worker", system, role, json.dumps(params)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
                                     start_new_session=True)

    def readline(self, deadline: float) -> str:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"worker {self.proc.pid} did not answer in time")
            r, _, _ = select.select([self.proc.stdout], [], [], left)
            if r:
                line = self.proc.stdout.readline()
                if not line:
                    raise RuntimeError(f"worker {self.proc.pid} exited with {self.proc.poll()}")
                return line.strip()

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        stop(self.proc)


def concurrent_produce(sys_name: str, system: System, procs: int, n_total: int, size: int,
                       timeout_s: float = 120.0) -> float:
    """`procs` producer processes on one fresh topic, n_total messages in all: acked msg/s, wall clock."""
    topic = system.new_topic()
    children = []
    try:
        per = max(1, n_total // procs)
        children = [Child(sys_name, "produce", {"conn": system.conn(), "topic": topic, "n": per, "size": size})
                    for _ in range(procs)]
        deadline = time.monotonic() + timeout_s
        for c in children:
            if c.readline(deadline) != "ready":
                raise RuntimeError("worker did not say ready")
        for c in children:
            c.send("go")
        results = [json.loads(c.readline(deadline)) for c in children]
        acked = sum(r["acked"] for r in results)
        if acked != per * procs:
            raise RuntimeError(f"{sys_name}: {acked} of {per * procs} acked by {procs} producers")
        return acked / (max(r["t1"] for r in results) - min(r["t0"] for r in results))
    finally:
        for c in children:
            c.kill()
        system.drop_topic(topic)


def e2e_run(sys_name: str, system: System, topic: str, rate: int, seconds: float, produce_paced) -> dict:
    """Start the live consumer in another process, call produce_paced(n) here, read its latencies."""
    n = int(rate * seconds)
    child = Child(sys_name, "e2e", {"conn": system.conn(), "topic": topic, "count": n, "seconds": seconds + 15})
    try:
        if child.readline(time.monotonic() + 60) != "ready":
            raise RuntimeError("e2e consumer did not say ready")
        t0 = time.perf_counter()
        produce_paced(n)
        rate_done = n / (time.perf_counter() - t0)
        out = json.loads(child.readline(time.monotonic() + seconds + 30))
    finally:
        child.kill()
    return e2e_result(sys_name, n, out, rate_done)


def e2e_result(sys_name: str, n: int, out: dict, rate_done: float) -> dict:
    """The e2e metrics from what the consumer printed; the publish rate reached tells whether
    the producer kept up with the rate asked for (latencies of one that fell behind are not
    comparable)."""
    if out["count"] < n:
        raise RuntimeError(f"{sys_name} e2e: consumer saw {out['count']} of {n}")
    return {"e2e_p50_us": out["p50_us"], "e2e_p99_us": out["p99_us"], "e2e_p999_us": out["p999_us"],
            "e2e_rate_msgs_s": rate_done}
