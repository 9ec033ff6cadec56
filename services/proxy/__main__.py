"""python -m quiver_proxy"""

from quiver.runtime.settings import run_service

from .app import App
from .config import Config
from .metrics import collector


def main(argv=None) -> None:
    run_service(Config, App, "quiver_proxy", argv, collector)


if __name__ == "__main__":
    main()
