"""The `quiver` command: the CLI when its packages are installed (quiver[cli]), else a line
saying so; `pip install quiver` alone is the client SDK."""

import importlib.util
import sys


def main() -> None:
    missing = [m for m in ("click", "rich", "yaml") if importlib.util.find_spec(m) is None]
    if missing:
        sys.exit(f"the quiver CLI needs {', '.join(missing)}: pip install 'quiver[cli]'")
    from quiver.tools.cli import main as cli_main
    cli_main()
