"""Where a problem's compile time goes, without a GPU: per problem, the
seconds of loading the file and building the model (on the meta device: no
memory), capture (torch.export + decompositions + lowering), the core's
compile (passes, fusion, CUDA source, plan), and NVRTC for every kernel of the
plan (for --arch, default sm_90): cold (an empty disk cache, all kernels in
parallel as the runtime compiles them), the slowest single kernel, and cached
(read back from the disk cache).

  python tools/profile_compile.py [FILES_OR_DIRS...] [--arch 90] [--json OUT]

Default: benchmarks/problems. One process for all problems, so the import
(printed first) is paid once.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

t_start = time.perf_counter()
import torch  # noqa: E402

t_torch = time.perf_counter() - t_start
from fuseforge._native import core  # noqa: E402
from fuseforge.capture import capture  # noqa: E402
from fuseforge.harness.bench import find_problems  # noqa: E402
from fuseforge.harness.problem import load_problem, problem_name  # noqa: E402
from fuseforge.runtime.options import compile_ir  # noqa: E402

t_import = time.perf_counter() - t_start


def profile(path: Path, arch: int) -> dict:
    row: dict = {}
    t0 = time.perf_counter()
    mod = load_problem(path)
    with torch.device("meta"):
        torch.manual_seed(0)
        model = mod.Model(*mod.get_init_inputs())
        inputs = mod.get_inputs()
    row["load_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    captured = capture(model, inputs, name=problem_name(path))
    row["capture_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    plan = compile_ir(captured.text, "fp32", arch).plan
    row["core_compile_s"] = time.perf_counter() - t0
    kernels = list(plan.kernels)
    row["kernels"] = len(kernels)
    row["cutlass_kernels"] = sum(k.cutlass for k in kernels)
    with tempfile.TemporaryDirectory(prefix="ff-profile-") as cache:
        os.environ["FUSEFORGE_CACHE_DIR"] = cache
        core.clear_memory_cache()
        t0 = time.perf_counter()
        loaded = core.load_kernels(kernels, arch)
        row["nvrtc_cold_parallel_s"] = time.perf_counter() - t0
        failed = [k.name for k, lk in zip(kernels, loaded) if isinstance(lk, str)]
        if failed:
            row["failed"] = failed
        core.clear_memory_cache()
        t0 = time.perf_counter()
        core.load_kernels(kernels, arch)
        row["nvrtc_cached_s"] = time.perf_counter() - t0
    # The slowest kernel alone (a cold compile, cache bypassed).
    os.environ["FUSEFORGE_DISABLE_CACHE"] = "1"
    slowest = 0.0
    for k in kernels:
        core.clear_memory_cache()
        t0 = time.perf_counter()
        core.load_kernels([k], arch)
        slowest = max(slowest, time.perf_counter() - t0)
    os.environ.pop("FUSEFORGE_DISABLE_CACHE")
    row["nvrtc_slowest_kernel_s"] = slowest
    row["total_cold_s"] = row["load_s"] + row["capture_s"] + row["core_compile_s"] + row["nvrtc_cold_parallel_s"]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "paths", nargs="*", default=[str(Path(__file__).resolve().parents[1] / "benchmarks" / "problems")]
    )
    parser.add_argument("--arch", type=int, default=90)
    parser.add_argument("--json")
    args = parser.parse_args()
    print(
        f"import: torch {t_torch:.2f} s, fuseforge and the rest {t_import - t_torch:.2f} s; "
        f"{os.cpu_count()} CPUs; NVRTC {core.nvrtc_version()}"
    )
    cols = (
        "load_s",
        "capture_s",
        "core_compile_s",
        "nvrtc_cold_parallel_s",
        "nvrtc_slowest_kernel_s",
        "nvrtc_cached_s",
        "total_cold_s",
    )
    print(f"{'problem':36} {'kern':>4} {'cutl':>4} " + " ".join(f"{c[:-2]:>12}" for c in cols))
    rows = {}
    for path in find_problems(args.paths):
        try:
            row = profile(path, args.arch)
        except Exception as e:  # noqa: BLE001 - a profile of the rest is still useful
            print(f"{problem_name(path):36} failed: {type(e).__name__}: {str(e)[:200]}")
            continue
        rows[problem_name(path)] = row
        print(
            f"{problem_name(path):36} {row['kernels']:>4} {row['cutlass_kernels']:>4} "
            + " ".join(f"{row[c]:>12.3f}" for c in cols),
            flush=True,
        )
    if rows:
        for c in cols:
            vals = [r[c] for r in rows.values()]
            print(f"{c}: median {statistics.median(vals):.3f} s, max {max(vals):.3f} s, sum {sum(vals):.2f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"import_s": t_import, "problems": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
