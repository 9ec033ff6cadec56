"""python -m quiver_console"""

from quiver.runtime.settings import run_service

from .app import App
from .config import Config
from .metrics import collector


def main(argv=None) -> None:
    # the token is never logged; the HTTP socket binds before anything else starts
    run_service(Config, App, "quiver_console", argv, collector, secret=("admin_token",), bind_first=True)


if __name__ == "__main__":
    main()
