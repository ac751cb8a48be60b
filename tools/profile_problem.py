"""Per-kernel CUDA times of eager, torch.compile and fuseforge for one problem
(torch.profiler), to see where a gap comes from.
Usage: profile_problem.py FILE [--no-inductor] [--tf32] [--train] [--rows N]
  --tf32: all three under the opt-in tf32 precision
  --train: profile the training step (forward, backward of the summed
           outputs) and print each one's memory: what the forward leaves
           allocated (saved tensors and outputs) and the step's peak, beyond
           the model and inputs"""

import copy
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import fuseforge
from fuseforge.harness.problem import load_problem
from fuseforge.harness.train import clear_grads, train_step, training_loss
from fuseforge.runtime.precision import precision_context

mod = load_problem(sys.argv[1])
train = "--train" in sys.argv
rows = int(sys.argv[sys.argv.index("--rows") + 1]) if "--rows" in sys.argv else 8
torch.manual_seed(0)
model = mod.Model(*mod.get_init_inputs()).cuda()
inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]
precision = "tf32" if "--tf32" in sys.argv else "fp32"
runs = {"eager": model, "fuseforge": fuseforge.optimize(copy.deepcopy(model), precision=precision)}
if "--no-inductor" not in sys.argv:
    runs["inductor"] = torch.compile(copy.deepcopy(model))


def memory_mib(fn: torch.nn.Module) -> str:
    """After-forward and peak bytes of one training step, beyond what was allocated before it."""
    clear_grads(fn)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with torch.enable_grad():
        loss = training_loss(fn(*inputs))
        torch.cuda.synchronize()
        after_forward = torch.cuda.memory_allocated() - before
        loss.backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    clear_grads(fn)
    return f"after forward {after_forward / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB"


with precision_context(precision), torch.set_grad_enabled(train):
    for name, fn in runs.items():
        step = (lambda fn=fn: (train_step(fn, inputs), clear_grads(fn))) if train else (lambda fn=fn: fn(*inputs))
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                step()
            torch.cuda.synchronize()
        print(f"==== {name}" + (f" ({memory_mib(fn)})" if train else ""))
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=rows, max_name_column_width=70))
