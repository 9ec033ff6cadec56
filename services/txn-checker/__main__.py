"""python -m quiver_txn"""

import logging
import signal

from quiver.settings import load, log_config, setup_logging

from .app import App
from .config import Config


def main(argv=None) -> None:
    config = load(Config, argv, prog="quiver_txn")
    setup_logging(config.log_level)
    log_config(logging.getLogger("quiver_txn"), config)
    app = App(config)
    signal.signal(signal.SIGTERM, lambda *_: app.service.stop())
    try:
        app.run()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
