#!/usr/bin/env bash
# Creates .venv with the pinned dependencies and installs fuseforge into it.
# Usage: bash scripts/setup.sh          (idempotent; rebuilds the extension)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r requirements.txt
.venv/bin/python -m pip install -q --no-deps -r requirements-headers.txt
# scikit-build-core builds the C++ core + nanobind extension (build dir: build/).
.venv/bin/python -m pip install -q --no-build-isolation --no-deps .
echo "fuseforge installed in .venv ($(.venv/bin/python -c 'import fuseforge; print(fuseforge.__version__)'))"
