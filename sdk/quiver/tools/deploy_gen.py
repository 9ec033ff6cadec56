"""deploy/swarm and deploy/k8s, generated from compose.yaml: one description of the services.

compose.yaml stays the one place a service's module, settings, ports and health check are
written (`quiver up` and compose run it as is). This module lays an orchestrator's needs over
it, from the table PARTS: name servers that run the controller and brokers with
--auto-failover (their settings from compose's `failover` profile), a stable identity per
replica (name, data volume, advertised address), the CURVE keys as secrets, update policies.

    python -m quiver.tools.deploy_gen           # rewrite deploy/swarm/*.yaml and deploy/k8s/*.yaml
    python -m quiver.tools.deploy_gen --check   # exit 1 when a committed file differs
"""

import argparse
import os
import sys
from dataclasses import dataclass

import yaml

from quiver.tools.compose import interpolate
from quiver.wire.curve import SERVICE_KINDS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
AUTH_DIR = "/dev/shm/quiver-auth"   # tmpfs: the keys never touch a disk of the container
BROKER_GROUP = "broker-a"           # the failover group the broker replicas form
PING_PORT_KEY = "QUIVER_LISTEN"


@dataclass(frozen=True)
class Part:
    name: str              # the service's name in the stack and in Kubernetes (quiver-<name>)
    base: str              # the compose service it is built from
    overlay: str = ""      # a compose service whose settings are laid over (the failover profile's)
    kind: str = ""         # auth service kind: pings with its own service key ("": with the admin key)
    key: str = ""          # a client without an auth dir: the one key file (secret) it acts with
    replicas: int = 1
    stateful: bool = False  # one data volume per replica, a name that follows the replica
    publish: tuple = ()    # settings whose port clients outside reach (console pages, gRPC, Kafka)
    drop: tuple = ()       # compose settings left out here
    addon: bool = False    # deployed on its own once its secret exists (not in the main stack)
    advertises: bool = True  # has --advertise: the address it registers with the name servers


PARTS = (
    Part("namesrv", "namesrv", "ctl-1", kind="namesrv", replicas=3, stateful=True, advertises=False,
         drop=("QUIVER_NAMESRV", "QUIVER_CONTROLLER_KEY_FILE")),   # Raft key: from the server secret
    Part("broker", "broker-store", "fo-1", kind="broker", replicas=3, stateful=True,
         drop=("QUIVER_METADATA_URL",)),   # a failover group's slaves copy the master's metadata
    Part("filter", "filter", kind="filter"),
    Part("scheduler", "scheduler", kind="scheduler", stateful=True),
    Part("txn-checker", "txn-checker", kind="txn-checker"),
    Part("proxy", "proxy", publish=("QUIVER_GRPC_LISTEN",)),
    # auth on: users log in with their own keys; the auth dir's admin key reads nothing
    Part("console", "console", advertises=False, publish=("QUIVER_HTTP_LISTEN",), drop=("QUIVER_ADMIN_TOKEN",)),
    # auth on: every Kafka client acts with this key, a user holding only what they all may do
    Part("kafka", "kafka", key="kafka", publish=("QUIVER_KAFKA_LISTEN",), addon=True),
)
NAMESRV = PARTS[0]


def load_compose(root: str = ROOT) -> dict:
    with open(os.path.join(root, "compose.yaml")) as f:
        return yaml.safe_load(f)["services"]


def module(svc: dict) -> str:
    cmd = svc["command"]
    if cmd[:2] != ["python", "-m"]:
        raise ValueError(f"compose command must be 'python -m <package>', got {cmd!r}")
    return cmd[2]


def settings(part: Part, services: dict, literal: bool) -> dict:
    """The part's compose settings (overlay on base), less `drop`. literal: `${VAR:-x}` kept for
    `docker stack deploy` to fill in as compose does; else their defaults (Kubernetes has none)."""
    env = dict(services[part.base].get("environment") or {})
    env.update(services[part.overlay].get("environment") or {} if part.overlay else {})
    for k in (*part.drop, "QUIVER_ADVERTISE" if part.stateful else "", "QUIVER_BROKER_ID",
              "QUIVER_CONTROLLER_RAFT", "QUIVER_CONTROLLER_PEERS"):
        env.pop(k, None)
    if part.name == "broker":
        env["QUIVER_BROKER_NAME"] = BROKER_GROUP
    out = {}
    for k, v in env.items():
        v = str(v) if literal else interpolate(v, {})
        if v or literal:
            out[k] = v
    return out


def orchestrated(part: Part, services: dict, literal: bool, hosts_of, self_host: str) -> dict:
    """The part's settings with the cluster's names: hosts_of(part) lists every replica's host,
    self_host is this replica's (a template the orchestrator fills in)."""
    env = settings(part, services, literal)
    ping = port(env, PING_PORT_KEY)
    if part is not NAMESRV:
        env["QUIVER_NAMESRV"] = peers(hosts_of(NAMESRV), port(settings(NAMESRV, services, literal), PING_PORT_KEY))
    if not part.key:
        env["QUIVER_AUTH_DIR"] = AUTH_DIR
    if part is NAMESRV:
        env["QUIVER_CONTROLLER_RAFT"] = f"{self_host}:{ping + 1}"
        env["QUIVER_CONTROLLER_PEERS"] = peers(hosts_of(part), ping + 1)
    if part.stateful and part.advertises:
        env["QUIVER_ADVERTISE"] = f"{self_host}:{ping}"
    return env


def port(env: dict, key: str) -> int:
    return int(env[key].rsplit(":", 1)[1])


def healthcheck(services: dict, part: Part) -> dict:
    hc = services[part.base]["healthcheck"]
    return {k: hc[k] for k in ("interval", "timeout", "retries")}


def key_file(part: Part) -> str:
    """The key file the service's health check pings with (a client without an auth dir acts
    with it too), in tmpfs."""
    if part.key:
        return f"{AUTH_DIR}/{part.key}.key"
    return f"{AUTH_DIR}/services/{part.kind}.key" if part.kind else f"{AUTH_DIR}/admin.key"


def ping_command(part: Part, port_: int) -> list[str]:
    """A service with an auth dir answers PING over CURVE; a client's without one is plain, and
    `quiver ping` with a key would get no answer."""
    creds = [] if part.key else ["--credentials", key_file(part)]
    return ["quiver", *creds, "ping", f"127.0.0.1:{port_}"]


def secret_name(what: str) -> str:
    return f"quiver-{what}-key"


def core_secrets() -> list[str]:
    """What a service that holds an auth dir needs: the server pair, every service's key (the ZAP
    handler tells services apart by their keys) and the admin key (the one user until the
    brokers' ACL arrives: without it no user could ever be added)."""
    return [secret_name("server"), *(secret_name(k) for k in SERVICE_KINDS), secret_name("admin")]


def entry(part: Part, mod: str, secrets_dir: str, dollar: str = "$", prelude: str = "") -> list[str]:
    """The container's command: its keys copied from the mounted secrets into tmpfs, owned by the
    service's user, mode 600 (services refuse key files or dirs others may read; a secret mount
    may be group-readable), then the service. `dollar` spells a shell `$` in the orchestrator's file."""
    d = dollar
    if not part.key:   # an auth dir: the server pair, every service's key, the admin key
        copy = [f"umask 077 && mkdir -p {AUTH_DIR}/services",
                f"for k in server admin; do cp {secrets_dir}/quiver-{d}k-key {AUTH_DIR}/{d}k.key; done",
                f"for k in {' '.join(SERVICE_KINDS)}; do cp {secrets_dir}/quiver-{d}k-key {AUTH_DIR}/services/{d}k.key; done",
                f"chmod 600 {AUTH_DIR}/*.key {AUTH_DIR}/services/*.key"]
    else:
        copy = [f"umask 077 && mkdir -p {AUTH_DIR}",
                f"cp {secrets_dir}/{secret_name(part.key)} {key_file(part)}", f"chmod 600 {key_file(part)}"]
    # an SDK client's key as a flag, not QUIVER_CREDENTIALS: a health check's `quiver` would take that too
    flag = f" --credentials {key_file(part)}" if part.key else ""
    return ["sh", "-c", f"{prelude}{' && '.join(copy)} && exec python -m {mod}{flag}"]


def peers(hosts: list[str], port_: int) -> str:
    return ";".join(f"{h}:{port_}" for h in hosts)


class Mode(int):
    """A file mode, written in octal (0400)."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(Mode, lambda d, v: d.represent_scalar("tag:yaml.org,2002:int", f"0{v:o}"))


def dump(doc, header: str) -> str:
    body = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)
    return "".join(f"# {line}".rstrip() + "\n" for line in header.strip().splitlines()) + body


def dump_all(docs: list, header: str) -> str:
    return dump(docs[0], header) + "".join("---\n" + dump(d, "") for d in docs[1:])


def generate(root: str = ROOT) -> dict[str, str]:
    """{path relative to root: text} of every generated file."""
    from quiver.tools import deploy_k8s, deploy_swarm
    services = load_compose(root)
    return {**deploy_swarm.files(services), **deploy_k8s.files(services)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m quiver.tools.deploy_gen", description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=ROOT, help="the repository (compose.yaml, deploy/)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file differs")
    args = ap.parse_args(argv)
    stale = []
    for rel, text in generate(args.root).items():
        path = os.path.join(args.root, rel)
        try:
            with open(path) as f:
                same = f.read() == text
        except FileNotFoundError:
            same = False
        if same:
            continue
        stale.append(rel)
        if not args.check:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
    for rel in stale:
        print(f"{'differs' if args.check else 'wrote'}: {rel}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
