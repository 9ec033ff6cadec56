"""python -m quiver_scheduler"""

import logging
import signal

from quiver.settings import load, log_config, setup_logging

from .app import App
from .config import Config


def main(argv=None) -> None:
    config = load(Config, argv, prog="quiver_scheduler")
    setup_logging(config.log_level)
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    log_config(logging.getLogger("quiver_scheduler"), config)
    app = App(config)
    signal.signal(signal.SIGTERM, lambda *_: app.service.stop())
    try:
        app.run()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
