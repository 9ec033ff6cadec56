#!/usr/bin/env bash
# Command 2: from a fresh machine to the full test suite. Extra args go to pytest
# (e.g. -m "not slow" for the fast part only; a path runs just that, in one pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
for arg in "$@"; do
  case "$arg" in tests*|*.py|*::*) exec .venv/bin/python -m pytest "$@" ;; esac
done
# The whole suite: the unit tests (in-process, CPU-bound, independent) on both cores, then the
# rest (real processes, ports, kill -9, timing) one at a time. Exit 5 is "nothing selected" (-m).
rc=0
.venv/bin/python -m pytest -n 2 tests/unit "$@" || rc=$?
[ "$rc" -eq 5 ] && rc=0
rest=0
.venv/bin/python -m pytest --ignore=tests/unit "$@" || rest=$?
[ "$rest" -eq 5 ] && rest=0
[ "$rc" -ne 0 ] && exit "$rc"
exit "$rest"
