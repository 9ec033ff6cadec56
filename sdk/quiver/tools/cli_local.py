"""`quiver up | down | status | ping | ingest`: a local cluster from compose.yaml, service health,
and the Spark ingest job. Does not own the process handling (local.py, compose.py) nor the
status rendering (cli_status.py) nor the ingest itself (quiver.spark, cli_ingest.py)."""

import json
import os
import signal
import time

import click

from quiver.tools.cli_common import EXIT_NOT_FOUND, finish, output_option, say

STATE_FILE = "quiver-up.json"
DEFAULT_DATA_DIR = "./data"
DATA_DIR = click.option("--data-dir", envvar="QUIVER_DATA_DIR", default=DEFAULT_DATA_DIR, show_default=True,
                        help="where `quiver up` keeps data and its state file (env QUIVER_DATA_DIR)")


def _compose_path(given: str | None) -> str:
    if given:
        return given
    for cand in ("compose.yaml", os.path.join(os.path.dirname(__file__), "..", "..", "..", "compose.yaml"),
                 os.path.join(os.path.dirname(__file__), "..", "..", "compose.yaml")):
        if os.path.exists(cand):
            return os.path.abspath(cand)
    raise click.UsageError("no compose.yaml here: pass --compose PATH")


def _state(data_dir: str) -> dict | None:
    try:
        with open(os.path.join(os.path.abspath(data_dir), STATE_FILE)) as f:
            return json.load(f)
    except OSError:
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True   # someone else's process: it exists
    return True


def state_namesrv(data_dir: str | None = None) -> str | None:
    """The name servers of the cluster `quiver up` runs from `data_dir` (QUIVER_DATA_DIR, else
    ./data), None when there is no state file or none of its services is alive any more."""
    state = _state(data_dir or os.environ.get("QUIVER_DATA_DIR") or DEFAULT_DATA_DIR)
    if not state or not state.get("namesrv"):
        return None
    if not any(_alive(svc.get("pid", 0)) for svc in state.get("services", []) if svc.get("pid")):
        return None
    return state["namesrv"]


def _secure_dir(data_dir: str) -> str:
    """<data-dir>/auth, created by `quiver auth init` logic on first use."""
    from quiver.wire.curve import init_auth_dir
    path = os.path.join(os.path.abspath(data_dir), "auth")
    if not os.path.exists(os.path.join(path, "server.key")):
        init_auth_dir(path)
    return path


# a module each role imports, and the extra that installs it (pyproject.toml)
_EXTRA_OF_ROLE = {"console": ("flask", "console"), "proxy": ("grpc", "proxy"), "kafka": ("kio", "kafka")}


def _need_extras(specs) -> None:
    """Refuse, saying what to install, when this install lacks what a service to start imports
    (`pip install quiver` is the client alone)."""
    import importlib.util
    need = {"server"} if importlib.util.find_spec("sqlalchemy") is None or \
        importlib.util.find_spec("apscheduler") is None else set()
    need |= {extra for s in specs for module, extra in [_EXTRA_OF_ROLE.get(s.role, (None, None))]
             if module and importlib.util.find_spec(module) is None}
    if need:
        raise click.ClickException(f"this install lacks the services' packages: pip install "
                                   f"'quiver[{','.join(sorted(need))}]' (or bash scripts/bootstrap.sh all)")


@click.command()
@DATA_DIR
@click.option("--compose", help="compose file (default: ./compose.yaml)")
@click.option("--scale", multiple=True, metavar="SERVICE=N", help="e.g. broker-store=3 (repeatable)")
@click.option("--free-ports", is_flag=True, help="any free ports instead of the compose ports")
@click.option("--flush", type=click.Choice(["sync", "async"]), default="async", show_default=True)
@click.option("--no-auto-create", "auto_create", is_flag=True, flag_value=False, default=True,
              help="brokers do not create topics on first send")
@click.option("--demo", is_flag=True, help="send, consume and query a few messages once up")
@click.option("--detach", is_flag=True, help="leave the cluster running and return")
@click.option("--secure", is_flag=True, help="auth on (CURVE + ACL): keys in <data-dir>/auth, made on first use")
def up(data_dir, compose, scale, free_ports, flush, auto_create, demo, detach, secure):
    """Start compose.yaml's services as local processes on loopback.

    \b
    Examples:
      quiver up --demo
      quiver up --scale broker-store=3 --free-ports --detach
      quiver up --secure --detach
    """
    from quiver.tools import compose as compose_mod
    from quiver.tools.local import LocalCluster
    specs = compose_mod.load(_compose_path(compose))
    if secure:   # unauthenticated Kafka clients would act as the admin: the gateway needs SASL users first
        specs = [s for s in specs if s.role != "kafka"]
    _need_extras(specs)
    counts = {}
    for item in scale:
        name, _, n = item.partition("=")
        if name not in {s.name for s in specs} or not n.isdigit():
            raise click.BadParameter(f"{item}: use SERVICE=N with a service of compose.yaml", param_hint="--scale")
        counts[name] = int(n)
    if not free_ports:
        from quiver.tools.ports import conflicts
        taken = conflicts("127.0.0.1", compose_mod.planned_ports(specs, counts))
        if taken:
            finish(EXIT_NOT_FOUND, "quiver up: nothing started: " + "; ".join(taken)
                   + ". Stop that process, or run `quiver up --free-ports` (the CLI then finds this cluster "
                     "through the state file in --data-dir)")
    auth_dir = _secure_dir(data_dir) if secure else None
    cluster = LocalCluster(data_dir, auth_dir=auth_dir)
    os.makedirs(cluster.data_dir, exist_ok=True)
    overrides = {s.name: {"QUIVER_FLUSH": flush, "QUIVER_AUTO_CREATE_TOPICS": "true" if auto_create else "false"}
                 for s in specs if s.role == "broker"}
    try:
        compose_mod.start(cluster, specs, counts, free_ports=free_ports, overrides=overrides)
    except Exception as exc:
        cluster.stop()
        finish(EXIT_NOT_FOUND, f"quiver up failed: {exc}")
    state = os.path.join(cluster.data_dir, STATE_FILE)
    cluster.write_state(state)
    say(f"Quiver is up (data in {cluster.data_dir}):")
    for svc in cluster.describe():
        metrics = f"  metrics http://{svc['metrics']}/metrics" if svc["metrics"] else ""
        say(f"  {svc['role']:<12} {svc['name']:<16} {svc['addr']:<22} pid {svc['pid']}{metrics}")
    say(f"  namesrv for clients: {cluster.namesrv}  (in {state}: quiver verbs run from here, or with "
        f"QUIVER_DATA_DIR={cluster.data_dir}, use it)")
    kafka = [s.url for s in cluster.services if s.role == "kafka"]
    if kafka:
        say(f"  Kafka clients: bootstrap.servers={','.join(kafka)}")
    say(f"export QUIVER_NAMESRV='{cluster.namesrv}'")
    if auth_dir:
        key = os.path.join(auth_dir, "admin.key")
        os.environ["QUIVER_CREDENTIALS"] = key  # the demo's clients
        say(f"  auth on: CURVE + ACL; SUPER user key {key}")
        say("    the Kafka gateway is not started: with auth on it needs --sasl-users (README, Kafka clients)")
        say(f"    export QUIVER_CREDENTIALS={key}   # then: quiver acl user add NAME --out NAME.key")
    if demo:
        from quiver.tools.demo import run_demo
        run_demo(cluster.namesrv)
    if detach:
        say("running in the background; stop with: quiver down")
        return
    say("Ctrl-C stops every service")
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    try:
        while not stop and all(s.alive() for s in cluster.services):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    cluster.stop()
    os.unlink(state)
    say("stopped")


@click.command()
@DATA_DIR
def down(data_dir):
    """Stop what `quiver up --detach` started (SIGTERM, then SIGKILL after 10 s).

    \b
    Examples:
      quiver down
      quiver down --data-dir /tmp/q
    """
    state = _state(data_dir)
    if not state:
        say("nothing started by `quiver up` here")
        return
    for svc in reversed(state["services"]):
        try:
            os.kill(svc["pid"], signal.SIGTERM)
        except ProcessLookupError:
            continue
        for _ in range(100):
            try:
                os.kill(svc["pid"], 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            os.kill(svc["pid"], signal.SIGKILL)
        say(f"stopped {svc['name']} (pid {svc['pid']})")
    os.unlink(os.path.join(os.path.abspath(data_dir), STATE_FILE))


@click.command()
@DATA_DIR
@click.option("-v", "--verbose", is_flag=True, help="each service's whole STATUS")
@click.option("--json", "as_json", is_flag=True, help="same as -o json")
@output_option
@click.pass_obj
def status(obj, data_dir, verbose, as_json, output):
    """Health and role of every service; exit 1 if one is down.

    The services `quiver up` started here, else the name servers and the brokers they know.

    \b
    Examples:
      quiver status
      quiver status -v
      quiver status -o json | jq '.services[] | select(.up | not)'
    """
    from quiver.tools.cli_status import cmd_status
    code = cmd_status(obj, _state(data_dir), verbose=verbose, as_json=as_json or obj.fmt(output) == "json")
    if code:
        finish(code)


@click.command()
@click.argument("addr")
@click.option("--timeout", type=float, default=1.0, show_default=True, help="seconds")
@click.pass_obj
def ping(obj, addr, timeout):
    """PING any service; exit 1 when it does not answer.

    \b
    Examples:
      quiver ping 127.0.0.1:10911
    """
    from quiver.tools.local import ping as do_ping
    t = obj.transport("ping")
    try:
        ok = do_ping(t, addr, timeout)
    finally:
        t.close()
    say("pong" if ok else f"no answer from {addr}")
    if not ok:
        finish(EXIT_NOT_FOUND)


def register(cli) -> None:
    from quiver.tools.cli_ingest import ingest
    for cmd in (up, down, status, ping, ingest):
        cli.add_command(cmd)

