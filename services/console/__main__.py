"""python -m quiver_console"""

import dataclasses
import logging
import signal

from quiver.runtime.settings import load, log_config, serve_metrics, setup_logging

from .app import App
from .config import Config
from .metrics import collector


def main(argv=None) -> None:
    config = load(Config, argv, prog="quiver_console")
    setup_logging(config.log_level, config.log_format)
    shown = dataclasses.replace(config, admin_token="***" if config.admin_token else "")  # never log the token
    log = logging.getLogger("quiver_console")
    log_config(log, shown)
    app = App(config)
    try:
        app.bind()
    except OSError as exc:
        raise SystemExit(f"--http-listen {config.http_listen} / --listen {config.listen}: {exc}") from None
    server = serve_metrics(log, app, config.metrics_listen, collector)
    signal.signal(signal.SIGTERM, lambda *_: app.service.stop())
    try:
        app.run()
    except KeyboardInterrupt:
        pass
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
