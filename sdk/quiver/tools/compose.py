"""compose.yaml as a local topology: what `quiver up` starts, in what order, with what env.

Each compose service built from this repo becomes N local processes
(`--scale svc=N`): same module, same QUIVER_* environment, with compose
hostnames mapped to 127.0.0.1, each replica on its own port (the compose port
+ 1000 per replica, or a free port; its metrics port likewise), its own data sub-directory and, for
brokers, its own name. Services with an `image:` only (postgres) or a profile
are not started locally.
"""

import importlib.util
import os
import re
from dataclasses import dataclass, field

import yaml

from quiver.tools.local import LocalCluster, ServiceProcess, free_port

ROLE_OF_MODULE = {"quiver_namesrv": "namesrv", "quiver_broker": "broker", "quiver_filter": "filter",
                  "quiver_scheduler": "scheduler", "quiver_txn": "txn-checker", "quiver_console": "console",
                  "quiver_proxy": "proxy", "quiver_kafka": "kafka"}
# the setting holding a service's client-facing port (besides its PING port), what routes or Metadata
# advertise, and how the summary names it
CLIENT_PORT = {"QUIVER_GRPC_LISTEN": "endpoints", "QUIVER_KAFKA_LISTEN": "bootstrap.servers"}


@dataclass
class ServiceSpec:
    name: str
    module: str
    env: dict
    port: int
    depends_on: list = field(default_factory=list)

    @property
    def role(self) -> str:
        return ROLE_OF_MODULE.get(self.module, self.name)


def load(path: str) -> list[ServiceSpec]:
    """The repo's services of a compose file, in dependency order."""
    with open(path) as f:
        doc = yaml.safe_load(f)
    specs = {}
    for name, svc in (doc.get("services") or {}).items():
        if "build" not in svc or svc.get("profiles"):
            continue
        cmd = svc.get("command") or []
        if isinstance(cmd, str):
            cmd = cmd.split()
        if len(cmd) < 3 or cmd[1] != "-m":
            raise ValueError(f"compose service {name!r}: command must be 'python -m <package>', got {cmd!r}")
        env = {str(k): interpolate(v) for k, v in (svc.get("environment") or {}).items()}
        listen = env.get("QUIVER_LISTEN", "0.0.0.0:0")
        deps = svc.get("depends_on") or []
        specs[name] = ServiceSpec(name, cmd[2], env, int(listen.rsplit(":", 1)[1]),
                                  list(deps) if isinstance(deps, (list, dict)) else [])
    ordered, seen = [], set()

    def visit(n):
        if n in seen or n not in specs:
            return
        seen.add(n)
        for d in specs[n].depends_on:
            visit(d)
        ordered.append(specs[n])
    for n in specs:
        visit(n)
    return ordered


_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def interpolate(value, env=None) -> str:
    """A compose environment value as docker compose passes it: `${VAR}`, `$VAR`, `${VAR:-default}`
    (unset or empty), `${VAR-default}` (unset) from this environment; `$$` is a `$`; null is ''."""
    env = os.environ if env is None else env
    if value is None:
        return ""

    def one(m):
        if m.group(0) == "$$":
            return "$"
        name = m.group(1) or m.group(4)
        got = env.get(name)
        if m.group(2) == ":-" and not got or m.group(2) == "-" and got is None:
            return m.group(3)
        return got or ""
    return _VAR.sub(one, str(value))


def available(module: str) -> bool:
    return importlib.util.find_spec(f"{module}.__main__") is not None


def start(cluster: LocalCluster, specs: list[ServiceSpec], scale: dict[str, int], free_ports: bool = False,
          overrides: dict[str, dict] | None = None, log=print) -> None:
    """Start every replica, one dependency level at a time, each healthy before the next level."""
    hostnames = {s.name for s in specs}
    namesrv_spec = next((s for s in specs if s.role == "namesrv"), None)
    n_ns = scale.get(namesrv_spec.name, 1) if namesrv_spec else 0
    ns_ports = [free_port() if free_ports else namesrv_spec.port + 1000 * i for i in range(n_ns)]
    namesrv = ";".join(f"{cluster.host}:{p}" for p in ns_ports)
    for spec in specs:
        if not available(spec.module):
            log(f"skipping {spec.name}: {spec.module} is not installed in this build")
            continue
        started = []
        for i in range(scale.get(spec.name, 1)):
            port = ns_ports[i] if spec is namesrv_spec else (free_port() if free_ports else spec.port + 1000 * i)
            addr = f"{cluster.host}:{port}"
            replica = f"{spec.name}-{i}"
            env = {k: _local_value(v, hostnames, cluster.host) for k, v in spec.env.items()}
            env.update(QUIVER_LISTEN=addr, QUIVER_ADVERTISE=addr, QUIVER_NAMESRV=namesrv)
            if "QUIVER_DATA_DIR" in env:
                env["QUIVER_DATA_DIR"] = os.path.join(cluster.data_dir, spec.name, replica)
            if env.get("QUIVER_METRICS_LISTEN"):
                env["QUIVER_METRICS_LISTEN"] = _metrics_addr(env["QUIVER_METRICS_LISTEN"], cluster.host, i, free_ports)
            for key in ("QUIVER_HTTP_LISTEN", *CLIENT_PORT):  # console pages, proxy, gateway: as the metrics port
                if env.get(key):
                    env[key] = _metrics_addr(env[key], cluster.host, i, free_ports)
            client_key = next((k for k in CLIENT_PORT if env.get(k)), None)
            if client_key:   # the proxy's routes, the gateway's Metadata name that port
                env["QUIVER_ADVERTISE"] = env[client_key]
            if spec.role == "broker":
                env["QUIVER_BROKER_NAME"] = f"broker-{chr(ord('a') + i)}" if i < 26 else f"broker-{i}"
            env.update((overrides or {}).get(spec.name, {}))
            svc = ServiceProcess(replica, spec.module, addr, [], os.path.join(cluster.data_dir, "logs", f"{replica}.log"),
                                 spec.role, env=env)
            if env.get("QUIVER_HTTP_LISTEN"):
                svc.url = f"http://{env['QUIVER_HTTP_LISTEN']}/"
            elif client_key:   # RocketMQ 5 clients' endpoints, Kafka clients' bootstrap server
                svc.url = env[client_key]
            cluster.services.append(cluster.start_service(svc))
            started.append(svc)
        cluster.wait()
        if spec.role == "broker":
            cluster.wait_registered(len(started))
        for svc in started:
            if svc.url:
                label = "open" if svc.url.startswith("http") else next(
                    (v for k, v in CLIENT_PORT.items() if svc.env.get(k)), "endpoints")
                log(f"{spec.name} {svc.name}: {label} {svc.url}")


PORT_SETTINGS = ("QUIVER_METRICS_LISTEN", "QUIVER_HTTP_LISTEN", *CLIENT_PORT)


def planned_ports(specs: list[ServiceSpec], scale: dict[str, int]) -> list[tuple[str, int]]:
    """(replica, port) of every port `start` binds without --free-ports, as it computes them."""
    out = []
    for spec in specs:
        if not available(spec.module):
            continue
        for i in range(scale.get(spec.name, 1)):
            out.append((f"{spec.name}-{i}", spec.port + 1000 * i))
            for key in PORT_SETTINGS:
                port = (spec.env.get(key) or "").rsplit(":", 1)[-1]
                if port.isascii() and port.isdigit() and int(port):
                    out.append((f"{spec.name}-{i} {key}", int(port) + 1000 * i))
    return out


def _metrics_addr(value: str, host: str, replica: int, free_ports: bool) -> str:
    """compose's metrics port (+ 1000 per replica, like the service port) on `host`, or a free one."""
    port = value.rsplit(":", 1)[-1]
    if free_ports:
        return f"{host}:{free_port()}"
    if not (port.isascii() and port.isdigit()):
        return value  # the service refuses it, naming the setting
    return f"{host}:{int(port) + 1000 * replica}"


def _local_value(value: str, hostnames: set[str], host: str) -> str:
    """'namesrv:9876;other:1' -> '127.0.0.1:9876;127.0.0.1:1' for compose hostnames."""
    parts = []
    for item in value.split(";"):
        name, sep, port = item.partition(":")
        parts.append(f"{host}:{port}" if sep and name in hostnames and port.isdigit() else item)
    return ";".join(parts)
