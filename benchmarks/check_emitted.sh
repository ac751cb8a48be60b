#!/usr/bin/env bash
# Emits each problem file given (fuseforge emit), builds the emitted
# extensions in parallel, then checks and times each emitted file in a fresh
# process that never imports fuseforge (tools/check_emitted.py), one JSON line
# each. BENCH=report.json (fuseforge bench --json of the same machine) adds
# the in-process fuseforge time and the ratio emitted/fuseforge.
# Usage: bash benchmarks/check_emitted.sh benchmarks/problems/seeds/*.py
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${EMIT_DIR:-$(mktemp -d /tmp/fuseforge-emit-XXXX)}
mkdir -p "$dir"
for p in "$@"; do
  python3 -m fuseforge.harness.cli emit "$p" -o "$dir/$(basename "$p")" > /dev/null || echo "EMIT FAILED: $p" >&2 &
done
wait
for f in "$dir"/*.py; do
  python3 -c "import runpy; runpy.run_path('$f')['_ff_extension']()" > "$f.build.log" 2>&1 \
    || { echo "BUILD FAILED: $f" >&2; tail -20 "$f.build.log" >&2; } &
done
wait
rc=0
for f in "$dir"/*.py; do
  python3 "$root/tools/check_emitted.py" "$f" --time --seeds 3 ${BENCH:+--bench "$BENCH"} || rc=1
done
exit $rc
