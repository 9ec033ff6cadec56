"""deploy/swarm/stack.yaml on a real single-node swarm: deploy from the locally built image, scale
the broker group to 3, SDK traffic, and the secrets only where they belong; then, on the same
stack, a rolling update of the brokers, then of the name servers, to a second image under SYNC
load, and a rollback of the brokers.

The swarm is initialised here only when the engine is in none (and left again at the end); the
stack, its secrets (prefixed with the stack's name), volumes and network are removed whatever
happens. Published ports are dropped from the test's copy of the stack (a host port of the
console or proxy may be taken by another test); clients run on the stack's attachable overlay
network, where the brokers' advertised names resolve.
"""

import importlib.util
import json
import os
import pathlib
import subprocess
import time
import uuid

import pytest
import yaml

from quiver.tools.deploy_gen import core_secrets
from quiver.wire.curve import init_auth_dir

# this directory's conftest, by path ("conftest" on sys.path is tests/conftest.py)
_spec = importlib.util.spec_from_file_location("quiver_docker_support", pathlib.Path(__file__).with_name("conftest.py"))
_support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_support)
IMAGE, ROOT, run = _support.IMAGE, _support.ROOT, _support.run

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(420)]
NAMESRV = "namesrv-1:9876;namesrv-2:9876;namesrv-3:9876"
NS_LABEL = "com.docker.stack.namespace"
LOAD = pathlib.Path(__file__).with_name("swarm_load.py")

# runs in a client container: a topic, the group's members, 40 SYNC sends, every one read back by a group
CLIENT = r"""
import json, sys, time
from quiver import Admin, Message, Producer, PullConsumer
from quiver.errors import QuiverError
ns, creds, topic, members = *sys.argv[1:4], int(sys.argv[4])
out = {}
with Admin(namesrv=ns, credentials=creds) as admin:
    deadline = time.monotonic() + 60
    while True:   # the group's master is elected a moment after the members register
        try:
            admin.create_topic(topic, queues=4)
            break
        except Exception as exc:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    while True:   # every member registered (a scaled task registers as it starts)
        out["ha"] = [r for r in admin.ha_status() if r["broker"] == "broker-a"]
        if len({r["addr"] for r in out["ha"]}) >= members or time.monotonic() > deadline:
            break
        time.sleep(1)
acked, retried = [], 0
with Producer("swarm-test", namesrv=ns, credentials=creds, send_timeout=10.0) as p:
    for i in range(40):
        body = f"m-{i}"
        for attempt in range(5):   # slaves that just joined are still copying the master's log
            try:
                r = p.send(Message(topic, body.encode(), keys=[body]))
            except QuiverError:
                retried += 1
                continue
            if r.status.value == "SEND_OK":
                acked.append(body)
                break
seen, deadline = set(), time.monotonic() + 60
with PullConsumer("swarm-test-group", namesrv=ns, credentials=creds, consume_from="first") as c:
    c.subscribe(topic, "*")
    while len(seen) < len(acked) and time.monotonic() < deadline:
        seen.update(m.body.decode() for m in c.poll(0.3))
out.update(acked=sorted(acked), seen=sorted(seen), retried=retried)
print(json.dumps(out, default=str))
"""


def _swarm_state() -> tuple[str, bool]:
    out = run("docker", "info", "--format", "{{.Swarm.LocalNodeState}} {{.Swarm.ControlAvailable}}").stdout.split()
    return out[0], out[1] == "true"


@pytest.fixture(scope="module")
def swarm(image):
    state, manager = _swarm_state()
    mine = state == "inactive"
    if mine:
        run("docker", "swarm", "init", "--advertise-addr", "127.0.0.1")
    elif not (state == "active" and manager):
        pytest.skip(f"this engine is a swarm {state} node that is not a manager")
    yield
    if mine:
        run("docker", "swarm", "leave", "--force", check=False)
        assert _swarm_state()[0] == "inactive"


class Stack:
    def __init__(self, name: str, auth: str):
        self.name, self.auth = name, auth
        self.secrets = [f"{name}-{s}" for s in core_secrets()]
        self.images: list[str] = []   # tags built here, removed with the stack

    def services(self) -> dict[str, str]:
        out = run("docker", "service", "ls", "--filter", f"label={NS_LABEL}={self.name}",
                  "--format", "{{.Name}} {{.Replicas}}").stdout.split("\n")
        return dict(line.split(" ", 1) for line in out if line.strip())

    def wait_converged(self, want: dict[str, int], timeout_s: float = 180) -> float:
        """Until every service runs its replicas, each healthy (swarm counts a task running then)."""
        t0 = time.monotonic()
        target = {f"{self.name}_{s}": f"{n}/{n}" for s, n in want.items()}
        while True:
            have = {k: v.split()[0] for k, v in self.services().items()}
            if all(have.get(k) == v for k, v in target.items()):
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout_s:
                ps = run("docker", "stack", "ps", "--no-trunc", self.name, check=False).stdout[-4000:]
                raise AssertionError(f"not converged in {timeout_s} s: want {target}, have {have}\n{ps}")
            time.sleep(2)

    def containers(self) -> list[dict]:
        ids = run("docker", "ps", "-q", "--filter", f"label={NS_LABEL}={self.name}").stdout.split()
        fmt = '{"id": "{{.Id}}", "service": "{{index .Config.Labels "com.docker.swarm.service.name"}}", ' \
              '"env": {{json .Config.Env}}}'
        return [json.loads(line) for line in run("docker", "inspect", "-f", fmt, *ids).stdout.splitlines()] if ids else []

    def client(self, topic: str, members: int) -> dict:
        out = run("docker", "run", "--rm", "--network", f"{self.name}_quiver", "--user", "0",
                  "-v", f"{self.auth}/admin.key:/k/admin.key:ro", IMAGE, "python", "-c", CLIENT,
                  NAMESRV, "/k/admin.key", topic, str(members), timeout=180)
        return json.loads(out.stdout.strip().splitlines()[-1])

    def build_next_image(self) -> str:
        """A second tag of the image, different by a label only: built in about a second."""
        tag = f"quiver:{self.name}-next"
        subprocess.run(["docker", "build", "-q", "-t", tag, "-"], input=f"FROM {IMAGE}\nLABEL quiver.test={self.name}\n",
                       text=True, capture_output=True, timeout=120, check=True)
        self.images.append(tag)
        return tag

    def update_state(self, service: str) -> str:
        status = run("docker", "service", "inspect", "-f", "{{json .UpdateStatus}}", f"{self.name}_{service}").stdout
        return (json.loads(status) or {}).get("State", "")

    def wait_images(self, service: str, image_id: str, n: int, timeout_s: float = 240) -> float:
        """Until `n` containers of the service run, all of image `image_id`; seconds taken."""
        t0 = time.monotonic()
        while (have := self.running_images(service)) != [image_id] * n:
            if time.monotonic() - t0 > timeout_s:
                ps = run("docker", "service", "ps", "--no-trunc", f"{self.name}_{service}", check=False).stdout[-4000:]
                raise AssertionError(f"{service}: {have} after {timeout_s} s, update {self.update_state(service)!r}\n{ps}")
            time.sleep(1)
        return time.monotonic() - t0

    def running_images(self, service: str) -> list[str]:
        """The image id of every running container of the service."""
        ids = run("docker", "ps", "-q", "--filter", f"label=com.docker.swarm.service.name={self.name}_{service}").stdout.split()
        return run("docker", "inspect", "-f", "{{.Image}}", *ids).stdout.split() if ids else []

    def remove(self) -> None:
        run("docker", "stack", "rm", self.name, check=False)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and (
                run("docker", "ps", "-aq", "--filter", f"label={NS_LABEL}={self.name}").stdout.strip()
                or run("docker", "network", "ls", "-q", "--filter", f"name={self.name}_").stdout.strip()):
            time.sleep(1)
        vols = [v for v in run("docker", "volume", "ls", "-q").stdout.split() if v.startswith(f"{self.name}_")]
        if vols:
            run("docker", "volume", "rm", "-f", *vols, check=False)
        run("docker", "secret", "rm", *self.secrets, check=False)
        if self.images:
            run("docker", "rmi", *self.images, check=False)


@pytest.fixture(scope="module")
def stack(swarm, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("swarm")
    name = f"qs{uuid.uuid4().hex[:6]}"
    auth = str(tmp_path / "auth")
    init_auth_dir(auth)
    s = Stack(name, auth)
    files = {"quiver-server-key": "server.key", "quiver-admin-key": "admin.key"}
    doc = yaml.safe_load(open(os.path.join(ROOT, "deploy", "swarm", "stack.yaml")))
    for svc in doc["services"].values():
        svc.pop("ports", None)
    doc["services"]["broker"]["deploy"]["replicas"] = 1
    doc["secrets"] = {k: {"external": True, "name": f"{name}-{k}"} for k in doc["secrets"]}
    path = tmp_path / "stack.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    try:
        for secret in core_secrets():
            rel = files.get(secret) or f"services/{secret.removeprefix('quiver-').removesuffix('-key')}.key"
            run("docker", "secret", "create", f"{name}-{secret}", os.path.join(auth, rel))
        run("docker", "stack", "deploy", "-c", str(path), name, env={"QUIVER_IMAGE": IMAGE})
        yield s
    finally:
        s.remove()
        assert not run("docker", "secret", "ls", "-q", "--filter", f"name={name}-").stdout.strip()
        assert not [v for v in run("docker", "volume", "ls", "-q").stdout.split() if v.startswith(f"{name}_")]


def test_deploy_scale_traffic_and_secrets(stack):
    singles = {"filter": 1, "scheduler": 1, "txn-checker": 1, "proxy": 1, "console": 1}
    took = stack.wait_converged({"namesrv": 3, "broker": 1, **singles})
    run("docker", "service", "scale", "-d", f"{stack.name}_broker=3")
    took += stack.wait_converged({"namesrv": 3, "broker": 3, **singles})
    print(f"swarm: deployed and scaled to 3 brokers in {took:.0f} s")

    got = stack.client("SwarmOrders", members=3)
    assert len(got["acked"]) == 40 and got["seen"] == got["acked"], got   # a retried send stored twice reads once
    print(f"swarm: 40 SYNC sends acked ({got['retried']} retried), all read back")
    # one failover group: its members advertise their slot's name, the controller made one master
    assert {r["addr"] for r in got["ha"]} == {f"broker-{i}:10911" for i in (1, 2, 3)}, got["ha"]
    assert [r["id"] for r in got["ha"]].count(0) == 1, got["ha"]

    # the broker volumes follow the slots: one each, named by the stack's service
    vols = {v for v in run("docker", "volume", "ls", "-q").stdout.split() if v.startswith(f"{stack.name}_broker-")}
    assert vols == {f"{stack.name}_broker-{i}" for i in (1, 2, 3)}

    server_secret = json.load(open(os.path.join(stack.auth, "server.key")))["secret_key"]
    expected = sorted(core_secrets())
    rows = stack.containers()
    assert len(rows) == 3 + 3 + len(singles)
    for row in rows:
        listed = run("docker", "exec", row["id"], "ls", "/run/secrets").stdout.split()
        assert sorted(listed) == expected, row["service"]
        assert not any(server_secret in e for e in row["env"]), f"{row['service']}: a key in its environment"
        mode = run("docker", "exec", row["id"], "stat", "-c", "%a %U", "/dev/shm/quiver-auth/server.key").stdout.split()
        assert mode == ["600", "quiver"], row["service"]
    # a container of the image outside the stack has none
    bare = run("docker", "run", "--rm", IMAGE, "sh", "-c", "ls -A /run/secrets 2>/dev/null | wc -l").stdout.strip()
    assert bare == "0"


def _image_id(ref: str) -> str:
    return run("docker", "image", "inspect", "-f", "{{.Id}}", ref).stdout.strip()


def _load_result(io: pathlib.Path, container: str) -> dict:
    (io / "stop").touch()
    code = run("docker", "wait", container, timeout=240).stdout.strip()
    logs = run("docker", "logs", "--tail", "40", container, check=False)
    assert code == "0" and (io / "result.json").exists(), f"load exited {code}\n{logs.stdout}\n{logs.stderr}"
    return json.loads((io / "result.json").read_text())


def _pauses(times: list[float], lo: float, hi: float, n: int = 3) -> list[list[float]]:
    """The n longest gaps between acknowledgements that overlap [lo, hi]: [start, length]."""
    gaps = sorted(((b - a, a) for a, b in zip(times, times[1:]) if b >= lo and a <= hi), reverse=True)[:n]
    return [[a, round(g, 2)] for g, a in gaps]


@pytest.mark.timeout(600)
def test_rolling_update_under_sync_load_then_rollback(stack, tmp_path):
    """docker service update --image of the brokers, one member at a time, then of the name servers
    (with their controllers), while a producer sends SYNC and a consumer group reads: nothing
    acknowledged lost, duplicates counted (a body stored twice only when its send was retried), the
    longest pauses printed; then docker service rollback of the brokers to the first image."""
    run("docker", "service", "scale", "-d", f"{stack.name}_broker=3")
    stack.wait_converged({"namesrv": 3, "broker": 3})
    first, nxt = _image_id(IMAGE), _image_id(stack.build_next_image())
    assert set(stack.running_images("broker")) == {first}

    io = tmp_path / "io"
    io.mkdir()
    load = f"{stack.name}-load"
    run("docker", "run", "-d", "--name", load, "--network", f"{stack.name}_quiver", "--user", "0",
        "-v", f"{stack.auth}/admin.key:/k/admin.key:ro", "-v", f"{LOAD}:/client/swarm_load.py:ro", "-v", f"{io}:/io",
        IMAGE, "python", "/client/swarm_load.py", NAMESRV, "/k/admin.key", "SwarmRolling", "/io")
    try:
        progress = io / "progress.json"
        deadline = time.monotonic() + 120
        while not (progress.exists() and json.loads(progress.read_text() or "{}").get("acked", 0) >= 50):
            assert time.monotonic() < deadline, run("docker", "logs", "--tail", "40", load, check=False).stderr
            time.sleep(1)
        began = json.loads(progress.read_text())["s"]
        run("docker", "service", "update", "-d", "--image", stack.images[-1], f"{stack.name}_broker")
        took = stack.wait_images("broker", nxt, 3)
        # swarm still watches the last member (update_config.monitor): not rolled back nor paused
        assert stack.update_state("broker") in ("updating", "completed")
        # then the name servers and their controllers (Raft), one at a time, under the same load
        ns_began = json.loads(progress.read_text())["s"]
        run("docker", "service", "update", "-d", "--image", stack.images[-1], f"{stack.name}_namesrv")
        ns_took = stack.wait_images("namesrv", nxt, 3)
        assert stack.update_state("namesrv") in ("updating", "completed")
        ns_ended = json.loads(progress.read_text())["s"]
        got = _load_result(io, load)
    finally:
        run("docker", "rm", "-f", load, check=False)

    acked, retried = set(got["acked"]), set(got["retried"])
    positions = {body: [tuple(p) for p in ps] for body, ps in got["deliveries"].items()}
    lost = sorted(acked - positions.keys())
    stored_twice = {b for b, ps in positions.items() if len(set(ps)) > 1}
    redelivered = sum(len(ps) - len(set(ps)) for ps in positions.values())
    print(f"swarm: rolling update of 3 brokers under SYNC load (from second {began}) in {took:.0f} s: {len(acked)} acked, "
          f"{len(lost)} lost, {len(retried)} sends retried, {len(stored_twice)} stored twice, "
          f"{redelivered} delivered again, longest producer pauses [at s, s] {got['pauses']}, "
          f"errors {got['errors']}\nswarm: the group's master and in-sync set [at s, master, set]: {got['group']}")
    ns_acked = [t for t in got["acked_s"] if ns_began <= t <= ns_ended]
    print(f"swarm: then a rolling update of 3 name servers (seconds {ns_began} to {ns_ended}) in {ns_took:.0f} s: "
          f"{len(ns_acked)} acked meanwhile, longest pauses in it [at s, s] {_pauses(got['acked_s'], ns_began, ns_ended)}")
    assert not got["failed"], f"sends never acknowledged: {got['failed'][:10]}"
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged messages never consumed: {lost[:10]}"
    assert stored_twice <= retried, f"stored twice though sent once: {sorted(stored_twice - retried)[:10]}"
    assert positions.keys() <= acked | retried, "a body that was never sent"

    run("docker", "service", "rollback", "-d", f"{stack.name}_broker")
    took = stack.wait_images("broker", first, 3)
    stack.wait_converged({"broker": 3})
    print(f"swarm: rollback of the brokers to the first image in {took:.0f} s")
