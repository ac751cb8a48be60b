#!/usr/bin/env bash
# Runs the GPU tests under compute-sanitizer (memcheck, then racecheck) and
# prints one summary line per tool. For a machine with a GPU and the CUDA
# toolkit's compute-sanitizer; takes several minutes per tool.
#   bash scripts/sanitize.sh [PYTEST_ARGS...]    (default: the fault tests and every problem at a reduced batch)
#   SANITIZE_TOOLS="memcheck racecheck" (the default) picks the tools.
# Success: "memcheck: ... 0 errors" and "racecheck: in generated ff_* kernels: 0 hazards" with
# no test failed, exit 0.
set -uo pipefail
cd "$(dirname "$0")/.."
SAN=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
[ -x "$SAN" ] || { echo "sanitize.sh: compute-sanitizer not found (install the CUDA toolkit or set CUDA_HOME)" >&2; exit 1; }
PY=${PYTHON:-.venv/bin/python}  # PYTHON=python3 where fuseforge is installed outside .venv (a GPU machine set up by benchmarks/device_setup.sh)
command -v "$PY" >/dev/null || { echo "sanitize.sh: no $PY here; run bash scripts/setup.sh first (or set PYTHON)" >&2; exit 1; }
TESTS=("$@")
[ ${#TESTS[@]} -gt 0 ] || TESTS=(tests/python/test_faults_gpu.py tests/python/test_gpu.py -k "faults or reduced_batch")
mkdir -p build
# A fresh kernel cache is not needed: the sanitizer checks launches, not compiles.
# The torch caching allocator hides out-of-bounds accesses inside its blocks.
export PYTORCH_NO_CUDA_MEMORY_CACHING=1
status=0
# One sanitizer run of pytest over $@ (after the tool's flags), appended to $log.
sanitize() {
  FUSEFORGE_TEST_CUDNN=$cudnn "$SAN" --tool "$tool" --target-processes all --launch-timeout 0 --print-limit 100 \
    "${extra[@]}" "$PY" -m pytest -q -m gpu -p no:cacheprovider "$@" >> "$log" 2>&1
}
for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do  # SANITIZE_TOOLS=racecheck: one of them
  log=build/sanitize-$tool.log
  : > "$log"
  if [ "$tool" = memcheck ]; then
    extra=(--leak-check no) cudnn=1  # torch keeps allocations past exit on purpose
    sanitize "${TESTS[@]}"
    rc=$?
    summary=$(grep -E "ERROR SUMMARY" "$log" | tail -1)
    pytest_line=$(grep -E "[0-9]+ (passed|failed)" "$log" | tail -1)
    echo "memcheck: ${summary:-no sanitizer summary} | pytest: ${pytest_line:-none} (exit $rc; log $log)"
    grep -q "ERROR SUMMARY: 0 errors" <<<"$summary" && [ $rc -eq 0 ] || status=1
    continue
  fi
  # racecheck checks the generated kernels (all named ff_*) only: cuBLAS's
  # Hopper GEMMs take minutes each under it and report hazards on their own
  # barrier protocol. It fails inside cuDNN's conv kernels and, with that
  # filter, inside some of cuBLAS's ("failed to handle a hardware exception",
  # seen on the H100), leaving CUDA unusable: so convs run without cuDNN
  # (FUSEFORGE_TEST_CUDNN=0, tests/python/conftest.py) and each test runs in a
  # process of its own, where such a failure costs only that test.
  extra=(--kernel-name kns=ff_) cudnn=0
  mapfile -t ids < <("$PY" -m pytest -q -m gpu -p no:cacheprovider --collect-only "${TESTS[@]}" 2>/dev/null | grep "::")
  passed=0 failed=()
  for id in "${ids[@]}"; do
    if sanitize "$id"; then passed=$((passed + 1)); else failed+=("$id"); fi
  done
  ours=$(grep -cE "Race reported between .* at ff_" "$log")  # shared-memory races are within one kernel
  library=$(grep -c "Internal Sanitizer Error" "$log")
  echo "racecheck: in generated ff_* kernels: $ours hazards | ${#ids[@]} tests, $passed passed;" \
       "${#failed[@]} failed, $library of them in the sanitizer's own error (log $log)"
  for id in "${failed[@]}"; do echo "  failed: $id"; done
  [ "$ours" -eq 0 ] && [ ${#ids[@]} -gt 0 ] && [ ${#failed[@]} -eq 0 ] || status=1
done
exit $status
