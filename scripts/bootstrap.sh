#!/usr/bin/env bash
# Creates .venv at the repo root and installs Quiver with the given extras (default: test, which
# is everything). Idempotent. scripts/up.sh asks for the services only (`all`).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
EXTRAS=${1:-test}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "Quiver needs Python >= 3.11 (found: $("$PY" --version 2>&1))" >&2; exit 1
fi
if ! "$PY" -m venv --help >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq python3-venv
fi
# PostgreSQL server for the transaction example's tests (Debian package; skipped when present)
if [[ ",$EXTRAS," == *,test,* ]] && ! { command -v pg_ctl >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; }; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq postgresql || echo "postgresql not installed: its tests will skip" >&2
  fi
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e ".[$EXTRAS]"
# The editable install reaches the packages through an import hook that type checkers and IDEs do
# not run: a plain path entry to sdk/ lets mypy and pyright find the SDK (typed, py.typed) too.
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$PWD/sdk" > "$site/quiver-sdk-path.pth"
