"""CUDA graph replay on and off side by side: `fuseforge.optimize(model)`
inference with FUSEFORGE_CUDA_GRAPHS=off and with the default (auto: a plan
replays where that times faster), and eager, in one process: milliseconds
(cold L2, CUDA events, median, interleaved: runtime/timing.py), whether the
plan replays, and the largest difference between the two ways' outputs.

    python tools/cuda_graph_parity.py PROBLEM.py [PROBLEM.py ...]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys

import torch

import fuseforge
from fuseforge.harness.compare import flatten_tensors, max_err
from fuseforge.harness.problem import build_model, problem_inputs
from fuseforge.runtime.options import ENV_CUDA_GRAPHS
from fuseforge.runtime.timing import time_cuda


def _optimized(model: torch.nn.Module, inputs: list, mode: str) -> fuseforge.OptimizedModule:
    """An optimized copy of `model` compiled, and its graph decided, under `mode`."""
    os.environ[ENV_CUDA_GRAPHS] = mode
    fast = fuseforge.optimize(copy.deepcopy(model))
    with torch.no_grad():
        for _ in range(2):
            fast(*inputs)
    return fast


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("problems", nargs="+")
    args = parser.parse_args(argv)
    rows = {}
    for problem in args.problems:
        mod, model = build_model(problem, None, "cuda")
        inputs = problem_inputs(mod, 0, "cuda")
        off = _optimized(model, inputs, "off")
        auto = _optimized(model, inputs, "auto")
        replays = any(s.executor.graph is not None for s in auto.specializations())
        with torch.no_grad():
            diff = max_err(flatten_tensors(off(*inputs)), flatten_tensors(auto(*inputs)))
            ms = time_cuda(
                {"eager": lambda: model(*inputs), "off": lambda: off(*inputs), "auto": lambda: auto(*inputs)}
            )
        name = os.path.basename(problem)
        rows[name] = {
            **{k: round(v, 4) for k, v in ms.items()},
            "replays": replays,
            "on_vs_off": round(ms["off"] / ms["auto"], 3),
            "max_diff_on_off": diff,
        }
        print(
            f"{name}: eager {ms['eager']:.4f} ms, step by step {ms['off']:.4f} ms, default {ms['auto']:.4f} ms "
            f"(replays: {replays}; {rows[name]['on_vs_off']:.2f}x), max |on - off| {diff:.3g}",
            flush=True,
        )
    os.environ.pop(ENV_CUDA_GRAPHS, None)
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
