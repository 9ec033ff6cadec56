"""python -m quiver_console"""

import dataclasses
import logging
import signal

from quiver.runtime.settings import load, log_config, setup_logging

from .app import App
from .config import Config


def main(argv=None) -> None:
    config = load(Config, argv, prog="quiver_console")
    setup_logging(config.log_level, config.log_format)
    shown = dataclasses.replace(config, admin_token="***" if config.admin_token else "")  # never log the token
    log_config(logging.getLogger("quiver_console"), shown)
    app = App(config)
    try:
        app.bind()
    except OSError as exc:
        raise SystemExit(f"--http-listen {config.http_listen} / --listen {config.listen}: {exc}") from None
    signal.signal(signal.SIGTERM, lambda *_: app.service.stop())
    try:
        app.run()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
