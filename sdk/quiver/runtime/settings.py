"""Config dataclass -> CLI flags + QUIVER_* env vars, shared by every service.

A field `broker_expiry_ms` is the flag `--broker-expiry-ms` and the env var
`QUIVER_BROKER_EXPIRY_MS`; a flag wins over the env var, which wins over the
default in config.py. Booleans also get `--no-<flag>`. `describe()` yields the
rows of the README's generated settings table, so docs cannot drift.
`ServiceSettings` holds what every service takes; `run_service` is every service's main.
"""

import argparse
import dataclasses
import logging
import os
import socket
from dataclasses import dataclass

from quiver.runtime import log_format
from quiver.wire.names import split_addrs  # noqa: F401  (services read address lists from settings)


def _parse_bool(text: str) -> bool:
    v = text.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {text!r}")


def _convert(field: dataclasses.Field, text: str):
    kind = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
    if kind == "bool":
        return _parse_bool(text)
    if kind == "int":
        return int(text)
    if kind == "float":
        return float(text)
    return text


def load(cls, argv=None, env=None, prog: str | None = None):
    """Build `cls` from argv, env and defaults; exits with a usage error on bad input."""
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(prog=prog, description=cls.__doc__)
    fields = dataclasses.fields(cls)
    for f in fields:
        flag = "--" + f.name.replace("_", "-")
        help_text = f.metadata.get("help", "")
        if f.type in ("bool", bool):
            parser.add_argument(flag, dest=f.name, action="store_const", const="true", help=help_text)
            parser.add_argument("--no-" + f.name.replace("_", "-"), dest=f.name, action="store_const",
                                const="false")
        else:
            parser.add_argument(flag, dest=f.name, help=f"{help_text} (env QUIVER_{f.name.upper()})")
    args = parser.parse_args(argv)
    values = {}
    for f in fields:
        raw = getattr(args, f.name)
        if raw is None:
            raw = env.get(f"QUIVER_{f.name.upper()}")
        if raw is None:
            continue
        try:
            values[f.name] = _convert(f, raw)
        except ValueError as exc:
            parser.error(f"--{f.name.replace('_', '-')}: {exc}")
    try:
        config = cls(**values)
        _check_shared(config)
        return config
    except ValueError as exc:
        parser.error(str(exc))


def _check_shared(config) -> None:
    """The settings every service has, checked in one place (ValueError names the flag)."""
    fmt = getattr(config, "log_format", "text")
    if fmt not in log_format.FORMATS:
        raise ValueError(f"--log-format {fmt!r}: use one of {', '.join(log_format.FORMATS)}")
    if getattr(config, "metrics_listen", ""):
        from quiver.runtime.metrics import parse_listen  # prometheus_client: only with metrics on
        parse_listen(config.metrics_listen)


def describe(cls):
    """(flag, env var, default, help) for each setting."""
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else "")
        yield ("--" + f.name.replace("_", "-"), f"QUIVER_{f.name.upper()}", default, f.metadata.get("help", ""))


def setup_logging(level: str, fmt: str = "text") -> None:
    """Root logging to stderr: `fmt` "text" or "json" (quiver.runtime.log_format)."""
    handler = logging.StreamHandler()
    handler.setFormatter(log_format.formatter(fmt))
    logging.basicConfig(level=getattr(logging, str(level).upper(), logging.INFO), handlers=[handler])


def log_config(log, config) -> None:
    log.info("effective config: %s", ", ".join(f"{k}={v!r}" for k, v in dataclasses.asdict(config).items()))


def default_identity(prefix: str) -> str:
    """A replica's unique name derived from its hostname (compose scaling)."""
    return f"{prefix}-{socket.gethostname()}"


def setting(default, help: str = ""):
    return dataclasses.field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class ServiceSettings:
    """What every service takes. A service's Config subclasses it, redeclares `listen` with its
    port, and may redeclare another field to say what it means there (its place stays first)."""
    listen: str = setting("0.0.0.0:0", "HOST:PORT to bind")
    namesrv: str = setting("127.0.0.1:9876", "name servers, 'h:p;h:p'")
    log_level: str = setting("INFO", "logging level")
    log_format: str = setting("text", "log lines: text, or json (one object a line: time, level, logger, "
                                      "message, exc)")
    metrics_listen: str = setting("", "HOST:PORT serving Prometheus metrics at /metrics; empty: off")
    auth_dir: str = setting("", "auth on: the dir `quiver auth init` made (server and service keys); "
                                "empty: auth off")


def run_service(config_cls, app_cls, prog: str, argv=None, collector=None, *, secret: tuple[str, ...] = (),
                bind_first: bool = False) -> None:
    """The whole `python -m <service>`: argv+env -> Config, logging, App(config).run(), SIGTERM stops
    (an app with a `drain()` method is asked to drain instead, on its service thread).

    With --metrics-listen, `collector(app)` (the service's metrics.collector) is served on
    it while the app runs. `secret`: settings logged as *** when set. `bind_first`: app.bind()
    before the metrics server, a taken port exiting with a message (services binding more than
    their --listen socket)."""
    import signal
    config = load(config_cls, argv, prog=prog)
    setup_logging(config.log_level, config.log_format)
    logging.getLogger("apscheduler").setLevel(logging.WARNING)  # one line per job run is noise
    log = logging.getLogger(prog)
    log_config(log, dataclasses.replace(config, **{k: "***" for k in secret if getattr(config, k)}))
    app = app_cls(config)
    app.service.freeze_gc = True
    if bind_first:
        try:
            app.bind()
        except OSError as exc:
            raise SystemExit(f"{prog}: cannot bind --listen {config.listen} or another of its addresses: {exc}") from None
    server = serve_metrics(log, app, config.metrics_listen, collector)
    # a service that drains (the broker) finishes what it took first; the others stop at once
    drain = getattr(app, "drain", None)
    signal.signal(signal.SIGTERM, lambda *_: app.service.call_soon_threadsafe(drain) if drain else app.service.stop())
    try:
        app.run()
    except KeyboardInterrupt:
        pass
    finally:
        if server is not None:
            server.stop()


def serve_metrics(log, app, listen: str, collector):
    """With `listen` set, `collector(app)` served on it (the MetricsServer, to stop), else None."""
    if not listen or collector is None:
        return None
    from quiver.runtime.metrics import MetricsServer  # prometheus_client: only with metrics on
    server = MetricsServer(listen, collector(app))
    try:
        app.service.metrics_addr = server.start()
    except OSError as exc:
        raise SystemExit(f"--metrics-listen {listen}: {exc}") from None
    log.info("metrics on http://%s/metrics", app.service.metrics_addr)
    return server


def advertised_addr(listen: str, advertise: str = "") -> str:
    """The address peers reach: --advertise, else the listen address with a wildcard host
    replaced by this machine's hostname (the compose service's container hostname)."""
    if advertise:
        return advertise
    host, port = listen.rsplit(":", 1)
    if host in ("0.0.0.0", "", "*"):
        host = socket.gethostname()
    return f"{host}:{port}"
