#!/usr/bin/env bash
# Command 1: from a fresh machine to a running local cluster plus a short demo.
# `quiver up` refuses a taken port before starting anything (pass --free-ports to use any free ones)
# and prints the `export QUIVER_NAMESRV=...` line of the cluster it started.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh all      # the services and the CLI, not the test stack
exec .venv/bin/quiver up --demo "$@"
