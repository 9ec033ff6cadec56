"""python -m quiver_kafka"""

from quiver.runtime.heap import keep_large_buffers
from quiver.runtime.settings import run_service

from .app import App
from .config import Config
from .metrics import collector


def main(argv=None) -> None:
    keep_large_buffers()
    run_service(Config, App, "quiver_kafka", argv, collector, bind_first=True)


if __name__ == "__main__":
    main()
