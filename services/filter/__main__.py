"""python -m quiver_filter (the filter server), or python -m quiver_filter check EXPR (see check.py)"""

import sys

from quiver.runtime.settings import run_service

from .app import App
from .config import Config
from .metrics import collector


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["check"]:
        from .check import main as check
        sys.exit(check(argv[1:]))
    run_service(Config, App, "quiver_filter", argv, collector)


if __name__ == "__main__":
    main()
