"""Inference through `torch.compile(model, backend="fuseforge")` against
`fuseforge.optimize(model)` on the same model and inputs: milliseconds of
each (cold L2, CUDA events, median, interleaved: harness/timing.py) and
whether their outputs agree.

    python tools/backend_parity.py PROBLEM.py [PROBLEM.py ...]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys

import torch

import fuseforge
from fuseforge.harness.problem import build_model, problem_inputs
from fuseforge.harness.timing import time_cuda


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("problems", nargs="+")
    args = parser.parse_args(argv)
    rows = {}
    for problem in args.problems:
        torch._dynamo.reset()
        mod, model = build_model(problem, None, "cuda")
        inputs = problem_inputs(mod, 0, "cuda")
        optimized = fuseforge.optimize(copy.deepcopy(model))
        compiled = torch.compile(copy.deepcopy(model), backend="fuseforge")
        with torch.no_grad():
            a, b = optimized(*inputs), compiled(*inputs)
            same = all(
                torch.allclose(x, y, rtol=1e-4, atol=1e-4)
                for x, y in zip(torch.utils._pytree.tree_leaves(a), torch.utils._pytree.tree_leaves(b))
                if isinstance(x, torch.Tensor)
            )
            ms = time_cuda({"optimize": lambda: optimized(*inputs), "backend": lambda: compiled(*inputs)})
        name = os.path.basename(problem)
        rows[name] = {**{k: round(v, 4) for k, v in ms.items()}, "ratio": round(ms["backend"] / ms["optimize"], 3)}
        print(
            f"{name}: optimize {ms['optimize']:.4f} ms, backend {ms['backend']:.4f} ms "
            f"({rows[name]['ratio']:.2f}x), outputs agree: {same}",
            flush=True,
        )
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
