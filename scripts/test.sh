#!/usr/bin/env bash
# Command 2: from a fresh machine to the full test suite. Extra args go to pytest
# (e.g. -m "not slow" for the fast part only).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/python -m pytest "$@"
