"""Host (CPU) microseconds per call of eager and fuseforge for one problem, and
fuseforge's per-step host time: shows whether the GPU waits on Python.
Usage: host_overhead.py FILE..."""
import copy
import statistics
import sys
import time

import torch

import fuseforge
from fuseforge.harness.problem import load_problem


def host_us(fn, n=50):
    times = []
    for _ in range(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e6)
    return statistics.median(times)


for path in sys.argv[1:]:
    mod = load_problem(path)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs()).cuda()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]
    fast = fuseforge.optimize(copy.deepcopy(model))
    with torch.no_grad():
        for _ in range(3):
            model(*inputs), fast(*inputs)
        eager, ff = host_us(lambda: model(*inputs)), host_us(lambda: fast(*inputs))
        spec = fast.specializations()[0]
        ex = spec.executor
        per_step = []
        for i, (run, frees) in enumerate(ex.steps):
            def timed(env, run=run, i=i):
                torch.cuda.synchronize()
                t = time.perf_counter()
                run(env)
                per_step.append((i, (time.perf_counter() - t) * 1e6))
            ex.steps[i] = (timed, frees)
        fast(*inputs)
    kinds = [s["kind"] + ":" + s.get("op", "") for s in spec.plan["steps"]]
    print(f"== {path.split('/')[-1]}: host us/call eager {eager:.0f}, fuseforge {ff:.0f} (steps: {len(kinds)})")
    for (i, us), k in zip(per_step[:len(kinds)], kinds):
        print(f"   step {i:2d} {k:40s} {us:7.1f} us (synced)")
