#!/usr/bin/env bash
# Runs the GPU tests under compute-sanitizer (memcheck, then racecheck) and
# prints one summary line per tool. For a machine with a GPU and the CUDA
# toolkit's compute-sanitizer; takes several minutes per tool.
#   bash scripts/sanitize.sh [PYTEST_ARGS...]    (default: the fault tests and every problem at a reduced batch)
#   SANITIZE_TOOLS="memcheck racecheck" (the default) picks the tools.
# Success: "memcheck: 0 errors" and "racecheck: 0 hazards", exit 0.
set -uo pipefail
cd "$(dirname "$0")/.."
SAN=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
[ -x "$SAN" ] || { echo "sanitize.sh: compute-sanitizer not found (install the CUDA toolkit or set CUDA_HOME)" >&2; exit 1; }
PY=${PYTHON:-.venv/bin/python}  # PYTHON=python3 where fuseforge is installed outside .venv (a lent GPU machine)
command -v "$PY" >/dev/null || { echo "sanitize.sh: no $PY here; run bash scripts/setup.sh first (or set PYTHON)" >&2; exit 1; }
TESTS=("$@")
[ ${#TESTS[@]} -gt 0 ] || TESTS=(tests/python/test_faults_gpu.py tests/python/test_gpu.py -k "faults or reduced_batch")
mkdir -p build
# A fresh kernel cache is not needed: the sanitizer checks launches, not compiles.
# The torch caching allocator hides out-of-bounds accesses inside its blocks.
export PYTORCH_NO_CUDA_MEMORY_CACHING=1
status=0
for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do  # SANITIZE_TOOLS=racecheck: one of them
  log=build/sanitize-$tool.log
  # memcheck: every kernel (torch keeps allocations past exit on purpose: no
  # leak check). racecheck: fuseforge's generated kernels (all named ff_*):
  # cuBLAS's and cuDNN's Hopper kernels report hazards on their own barrier
  # protocol (seen on the H100 in nvjet and xmma kernels) and take most of its
  # time, and it fails inside cuDNN's conv kernels ("failed to handle a
  # hardware exception"), so that pass runs convs without cuDNN
  # (FUSEFORGE_TEST_CUDNN=0, tests/python/conftest.py).
  case $tool in
    memcheck) extra=(--leak-check no); cudnn=1 ;;
    racecheck) extra=(--kernel-name kns=ff_); cudnn=0 ;;
  esac
  FUSEFORGE_TEST_CUDNN=$cudnn "$SAN" --tool "$tool" --target-processes all --launch-timeout 0 --print-limit 100 "${extra[@]}" \
    "$PY" -m pytest -q -m gpu -p no:cacheprovider "${TESTS[@]}" > "$log" 2>&1
  rc=$?
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|HAZARD" "$log" | tail -1)
  pytest_line=$(grep -E "[0-9]+ (passed|failed)" "$log" | tail -1)
  echo "$tool: ${summary:-no sanitizer summary} | pytest: ${pytest_line:-none} (exit $rc; log $log)"
  if [ $rc -ne 0 ] || ! grep -qE "ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards" <<<"$summary"; then status=1; fi
done
exit $status
