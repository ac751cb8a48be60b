#!/usr/bin/env bash
# Runs every test: lint and types (scripts/lint.sh), the C++ unit and golden
# tests (CTest), then pytest.
# GPU tests (-m gpu) run only where torch sees a CUDA device; they skip elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/prereqs.sh
ff_check_prereqs --tests || { echo "fuseforge: install the above, then run bash scripts/test.sh again" >&2; exit 1; }
[ -x .venv/bin/python ] || bash scripts/setup.sh
# Lint and types first: seconds, where the builds below take minutes.
bash scripts/lint.sh
cmake -S . -B build/tests -DFF_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=Release > build-tests.log 2>&1 || { cat build-tests.log; exit 1; }
cmake --build build/tests -j"$(nproc)" >> build-tests.log 2>&1 || { tail -50 build-tests.log; exit 1; }
ctest --test-dir build/tests --output-on-failure -j"$(nproc)"
# pytest exits 5 when it collects nothing: that must fail, and it does under set -e.
.venv/bin/python -m pytest -q "$@"
