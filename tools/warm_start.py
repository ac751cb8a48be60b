"""Seconds from `fuseforge.optimize(model)` to the first output, in a new
process, cold (empty cache directory) and then warm (the cache the cold run
filled): what a second process of a training or serving job waits for.

    python tools/warm_start.py PROBLEM.py [PROBLEM.py ...] [--cache DIR]

Each measurement runs in a process of its own with torch already imported
and the model and inputs built before the clock starts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

_CHILD = """
import sys, time, torch, fuseforge
from fuseforge.harness.problem import build_model, problem_inputs
mod, model = build_model(sys.argv[1], None, "cuda")
inputs = problem_inputs(mod, 0, "cuda")
torch.cuda.synchronize()
start = time.perf_counter()
with torch.no_grad():
    fuseforge.optimize(model)(*inputs)
torch.cuda.synchronize()
print(time.perf_counter() - start)
"""


def _first_output_seconds(problem: str, cache: str) -> float:
    env = {**os.environ, "FUSEFORGE_CACHE_DIR": cache}
    out = subprocess.run([sys.executable, "-c", _CHILD, problem], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("problems", nargs="+")
    parser.add_argument("--cache", help="cache directory to start from (default: a new empty one per problem)")
    args = parser.parse_args(argv)
    rows = {}
    for problem in args.problems:
        cache = args.cache or tempfile.mkdtemp(prefix="fuseforge-warm-")
        cold = _first_output_seconds(problem, cache)
        warm = _first_output_seconds(problem, cache)
        rows[os.path.basename(problem)] = {"cold_s": round(cold, 3), "warm_s": round(warm, 3)}
        print(f"{os.path.basename(problem)}: cold {cold:.2f} s, warm {warm:.3f} s", flush=True)
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
