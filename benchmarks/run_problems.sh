#!/usr/bin/env bash
# Runs `fuseforge run` on the given problem files, one JSON per problem in $OUT_DIR
# (default benchmarks/results/latest), then prints a summary table. AGAINST=eager skips inductor.
set -uo pipefail
out=${OUT_DIR:-benchmarks/results/latest}
mkdir -p "$out"
for p in "$@"; do
  name=$(basename "$p" .py)
  timeout 300 python3 -m fuseforge.cli run "$p" --seeds 2 --against "${AGAINST:-eager,inductor}" --json "$out/$name.json" || echo "FAILED: $name"
done
python3 - "$out" <<'PY'
import json, pathlib, sys
rows = [json.loads(p.read_text()) for p in sorted(pathlib.Path(sys.argv[1]).glob("*.json"))]
print(f"{'problem':36} {'ok':3} {'err':>9} {'eager':>8} {'induct':>8} {'ff':>8} {'xE':>6} {'xI':>6}")
for r in rows:
    print(f"{r['problem']:36} {'y' if r['correct'] else 'N':3} {r['max_err_vs_eager']:9.2e} {r.get('eager_ms',0):8.3f} "
          f"{r.get('inductor_ms',0):8.3f} {r.get('fuseforge_ms',0):8.3f} {r.get('speedup_vs_eager',0):6.2f} {r.get('speedup_vs_inductor',0):6.2f}")
PY
