"""The settings every service takes are declared once (ServiceSettings); run_service is every main."""

import dataclasses
import importlib
import logging

import pytest

from quiver.runtime.settings import ServiceSettings, run_service, setting

SERVICES = ("quiver_namesrv", "quiver_broker", "quiver_filter", "quiver_scheduler", "quiver_txn",
            "quiver_console", "quiver_proxy")


@pytest.mark.parametrize("package", SERVICES)
def test_a_service_redeclares_a_shared_setting_only_to_say_something_else(package):
    config = importlib.import_module(f"{package}.config").Config
    assert issubclass(config, ServiceSettings)
    shared = {f.name: f for f in dataclasses.fields(ServiceSettings)}
    own = config.__dict__.get("__annotations__", {})
    for f in dataclasses.fields(config):
        if f.name in own and f.name in shared and f.name != "listen":   # listen: each its own port
            same = (f.default, f.metadata["help"]) == (shared[f.name].default, shared[f.name].metadata["help"])
            assert not same, f"{package}: {f.name} copies ServiceSettings' declaration"


@dataclasses.dataclass(frozen=True)
class _Config(ServiceSettings):
    listen: str = setting("127.0.0.1:1", "HOST:PORT to bind")
    token: str = setting("", "a secret")


class _App:
    def __init__(self, config, bind_error=None):
        self.config, self.bind_error, self.ran = config, bind_error, False
        self.service = type("S", (), {"freeze_gc": False, "stop": lambda self: None})()

    def bind(self):
        if self.bind_error:
            raise self.bind_error

    def run(self):
        self.ran = True


def test_run_service_logs_secrets_masked_and_runs_the_app(caplog):
    apps = []
    with caplog.at_level(logging.INFO, logger="prog"):
        run_service(_Config, lambda c: apps.append(_App(c)) or apps[-1], "prog", ["--token", "s3cret"],
                    secret=("token",), bind_first=True)
    assert apps[0].ran and apps[0].service.freeze_gc and apps[0].config.token == "s3cret"
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "token='***'" in logged and "s3cret" not in logged


def test_a_taken_port_exits_with_the_address():
    with pytest.raises(SystemExit, match="127.0.0.1:1.*in use"):
        run_service(_Config, lambda c: _App(c, OSError("address in use")), "prog", [], bind_first=True)


class _Jobs:
    def __init__(self, events, fail_stop=False):
        self.events, self.fail_stop = events, fail_stop

    def start(self):
        self.events.append("jobs start")

    def shutdown(self, wait):
        self.events.append(f"jobs stop wait={wait}")
        if self.fail_stop:
            raise RuntimeError("not running")


@pytest.mark.parametrize("fail_stop", [False, True])
def test_serve_stops_the_jobs_then_shuts_down_however_the_loop_ends(monkeypatch, fail_stop):
    from quiver.runtime.service import Service
    service = Service("127.0.0.1:0", {}, "t")
    events = []

    def run():
        events.append("run")
        raise RuntimeError("loop died")

    monkeypatch.setattr(service, "run", run)
    with pytest.raises(RuntimeError, match="loop died"):
        service.serve(_Jobs(events, fail_stop), lambda: events.append("shutdown"), wait_jobs=True)
    assert events == ["jobs start", "run", "jobs stop wait=True", "shutdown"]
    service.close()
