"""A Spark standalone cluster (one master, N workers) as local processes, for the Spark tests.

Runs the `spark-class` script that ships inside the pyspark package, so no Spark
download is needed: `Master` and `Worker` JVMs on loopback ports picked free, each
in its own session (process group) with its log in the cluster's directory.
`start()` waits for the master (a worker or driver that finds no master tries
again only 5-20 s later) and spawns the workers; a driver can start meanwhile, then
`wait_ready()` waits, with a deadline, until the master's web UI JSON lists every
worker ALIVE. `stop()` ends them by PID, then what is left of their process groups
(a worker starts executor JVMs and Python workers as its children).
Owns nothing of Quiver: the tests point a SparkSession at `master_url`.
"""

import json
import os
import signal
import subprocess
import urllib.request
from dataclasses import dataclass, field

from quiver.tools.local import free_port

from .waiting import wait_for


def spark_home() -> str:
    import pyspark
    return os.path.dirname(os.path.abspath(pyspark.__file__))


@dataclass
class StandaloneSpark:
    path: str                      # work dirs and logs live here
    workers: int = 2
    worker_cores: int = 1
    worker_memory: str = "512m"
    daemon_memory: str = "256m"    # heap of the master and worker JVMs themselves
    procs: list[subprocess.Popen] = field(default_factory=list)
    master_url: str = ""
    webui_url: str = ""

    def _spawn(self, name: str, *args: str) -> subprocess.Popen:
        home = spark_home()
        env = {**os.environ, "SPARK_HOME": home, "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_DAEMON_MEMORY": self.daemon_memory}
        with open(os.path.join(self.path, f"{name}.log"), "ab") as log:
            proc = subprocess.Popen([os.path.join(home, "bin", "spark-class"), *args], stdout=log,
                                    stderr=subprocess.STDOUT, env=env, cwd=self.path, start_new_session=True)
        self.procs.append(proc)
        return proc

    def start(self, timeout: float = 60.0) -> "StandaloneSpark":
        """Spawn the master, wait until it answers, spawn the workers (not waiting for them)."""
        os.makedirs(self.path, exist_ok=True)
        port, webui = free_port(), free_port()
        self.master_url, self.webui_url = f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{webui}"
        try:
            self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                        "--port", str(port), "--webui-port", str(webui))
            wait_for(lambda: self._check_running() or self.status(), timeout,
                     f"the Spark master at {self.webui_url} (logs in {self.path})", interval=0.25)
            for i in range(self.workers):
                work = os.path.join(self.path, f"worker-{i}")
                os.makedirs(work, exist_ok=True)
                self._spawn(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", self.master_url,
                            "--host", "127.0.0.1", "--cores", str(self.worker_cores), "--memory", self.worker_memory,
                            "--webui-port", str(free_port()), "--work-dir", work)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout: float = 60.0) -> "StandaloneSpark":
        """Until the master's web UI lists every worker ALIVE; fails early when a JVM exits."""
        wait_for(self._all_alive, timeout, f"{self.workers} Spark workers to register with {self.master_url}"
                 f" (logs in {self.path})", interval=0.5)
        return self

    def status(self) -> dict | None:
        """The master's web UI JSON (workers, apps), or None while it does not answer."""
        try:
            with urllib.request.urlopen(self.webui_url + "/json/", timeout=2) as r:
                return json.load(r)
        except OSError:
            return None

    def _check_running(self) -> None:
        dead = [p.args[1] for p in self.procs if p.poll() is not None]
        if dead:
            raise AssertionError(f"Spark process exited early: {dead} (logs in {self.path})")

    def _all_alive(self) -> bool:
        self._check_running()
        s = self.status()
        return bool(s) and sum(w.get("state") == "ALIVE" for w in s.get("workers", [])) >= self.workers

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM each by PID (workers first: they stop their executors), then SIGKILL what is left of each group."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
            try:
                os.killpg(proc.pid, signal.SIGKILL)    # the group's leader is ours: executors, Python workers
            except (ProcessLookupError, PermissionError):
                pass
        self.procs.clear()

    def __enter__(self) -> "StandaloneSpark":
        """Started, not yet waited for: start a driver meanwhile, then wait_ready()."""
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
