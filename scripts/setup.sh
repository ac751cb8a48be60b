#!/usr/bin/env bash
# Creates .venv with the pinned dependencies and installs fuseforge into it.
# Usage: bash scripts/setup.sh          (idempotent; rebuilds the extension)
# Checks the prerequisites first (scripts/prereqs.sh: Python >= 3.10 with venv,
# a C++17 compiler, CMake >= 3.24, the CUDA toolkit), one line per missing one.
# Each step prints a line as it starts and its seconds when it ends (the
# dependencies and the build take minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/prereqs.sh
printf 'fuseforge setup: checking the prerequisites ... '
SECONDS=0
if missing=$(ff_check_prereqs 2>&1 >/dev/null); then
  echo "$SECONDS s"
else
  echo "missing"
  echo "$missing" >&2
  echo "fuseforge: install the above, then run bash scripts/setup.sh again" >&2
  exit 1
fi

PY=${PYTHON:-python3}
LOG=build/setup.log
mkdir -p build
: > "$LOG"
# Runs one step with its output in $LOG, saying on stdout what it does and how
# many seconds it took; on failure says which step, its first error line and
# where the whole log is, instead of pip's or CMake's dump.
step() {
  local what=$1 start first_error
  shift
  echo "== $what: $*" >> "$LOG"
  start=$(wc -l < "$LOG")
  printf 'fuseforge setup: %s ... ' "$what"
  SECONDS=0
  if "$@" >> "$LOG" 2>&1; then
    echo "$SECONDS s"
  else
    echo "failed after $SECONDS s"
    first_error=$(tail -n +"$((start + 1))" "$LOG" | grep -m1 -iE 'error|could not|not found' |
                  sed 's/^[[:space:]]*//' | cut -c1-200)
    echo "fuseforge: $what failed${first_error:+: $first_error}" >&2
    echo "fuseforge: the full log is $LOG" >&2
    exit 1
  fi
}
[ -x .venv/bin/python ] || step "creating .venv" "$PY" -m venv .venv
step "upgrading pip" .venv/bin/python -m pip install --upgrade pip
step "installing the pinned dependencies (requirements.txt)" .venv/bin/python -m pip install -r requirements.txt
# scikit-build-core builds the C++ core + nanobind extension (build dir: build/).
step "building the C++ core and the extension" .venv/bin/python -m pip install --no-build-isolation --no-deps .
echo "fuseforge installed in .venv ($(.venv/bin/python -c 'import fuseforge; print(fuseforge.__version__)'))"
