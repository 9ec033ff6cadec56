"""python -m quiver_broker"""

import dataclasses
import sys

from quiver.runtime.heap import keep_large_buffers
from quiver.runtime.settings import run_service

from .app import App
from .config import Config
from .data_format import EXIT_FORMAT, FormatError
from .metrics import collector
from .identity import claim_slot


def make_app(config: Config) -> App:
    """App(config); `--broker-name auto` becomes the broker-N slot claimed in --data-dir,
    whose lock this process then holds until it exits (identity.py)."""
    if config.auto_name:
        config = dataclasses.replace(config, broker_name=claim_slot(config.data_dir).name)
    return App(config)


def main(argv=None) -> None:
    keep_large_buffers()   # pull answers of megabytes: no page faults each
    try:
        run_service(Config, make_app, "quiver_broker", argv, collector)
    except FormatError as exc:  # one line an operator (or an orchestrator's event log) can act on
        sys.stderr.write(f"quiver_broker: {exc}\n")
        raise SystemExit(EXIT_FORMAT) from None


if __name__ == "__main__":
    main()
