"""Per-kernel CUDA times of eager, torch.compile and fuseforge for one problem
(torch.profiler), to see where a gap comes from.
Usage: profile_problem.py FILE [--no-inductor] [--tf32]  (--tf32: all three under
the opt-in tf32 precision)"""

import copy
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import fuseforge
from fuseforge.harness.problem import load_problem
from fuseforge.runtime.precision import precision_context

mod = load_problem(sys.argv[1])
torch.manual_seed(0)
model = mod.Model(*mod.get_init_inputs()).cuda()
inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]
precision = "tf32" if "--tf32" in sys.argv else "fp32"
runs = {"eager": model, "fuseforge": fuseforge.optimize(copy.deepcopy(model), precision=precision)}
if "--no-inductor" not in sys.argv:
    runs["inductor"] = torch.compile(copy.deepcopy(model))
with torch.no_grad(), precision_context(precision):
    for name, fn in runs.items():
        for _ in range(3):
            fn(*inputs)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                fn(*inputs)
            torch.cuda.synchronize()
        print(f"==== {name}")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=8, max_name_column_width=70))
