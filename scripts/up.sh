#!/usr/bin/env bash
# Command 1: from a fresh machine to a running local cluster plus a short demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/quiver up --demo "$@"
