"""A service bound beyond loopback with auth off warns at start (how to turn auth on); on
loopback, or with auth on, it does not. The console's web pages warn the same way.

The listen addresses carry a port no socket accepts, so bind() logs (or not) and then fails
before anything listens: nothing is ever opened beyond loopback."""

import logging

import pytest
import zmq

from quiver.runtime.security import Security
from quiver.runtime.service import Service
from quiver.wire.curve import init_auth_dir
from quiver_console.app import warn_if_exposed
from quiver_console.config import Config

UNBINDABLE = "not-a-port"


def _bind_log(caplog, host: str, security=None) -> str:
    caplog.clear()
    svc = Service(f"{host}:{UNBINDABLE}", {}, "probe", security=security)
    with caplog.at_level(logging.WARNING, logger="quiver.runtime.service"):
        with pytest.raises(zmq.ZMQError):
            svc.bind()
    svc.close()
    return caplog.text


def test_service_warns_beyond_loopback_with_auth_off_only(caplog, tmp_path):
    text = _bind_log(caplog, "0.0.0.0")
    assert "probe listens on 0.0.0.0" in text and "auth off" in text and "--auth-dir" in text
    assert _bind_log(caplog, "127.0.0.1") == ""
    auth = str(tmp_path / "auth")
    init_auth_dir(auth)
    assert _bind_log(caplog, "0.0.0.0", Security(auth, "namesrv")) == ""


def test_console_warns_beyond_loopback_with_auth_off_only(caplog, tmp_path):
    def logged(config, host):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="quiver_console.app"):
            warn_if_exposed(config, host, f"http://{host}:8080/")
        return caplog.text
    assert "auth is off and the console listens beyond loopback (http://0.0.0.0:8080/)" in logged(Config(), "0.0.0.0")
    assert logged(Config(), "127.0.0.1") == ""
    assert logged(Config(auth_dir=str(tmp_path)), "0.0.0.0") == ""
