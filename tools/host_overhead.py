"""Host (CPU) microseconds per call of eager and fuseforge for one problem, and
fuseforge's per-step host time: shows whether the GPU waits on Python.
Usage: host_overhead.py [--profile] FILE...  (--profile: cProfile's top
functions over 200 calls of the fuseforge module)"""

import copy
import cProfile
import pstats
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


profile = "--profile" in sys.argv
for path in [a for a in sys.argv[1:] if a != "--profile"]:
    mod = load_problem(path)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs()).cuda()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]
    fast = fuseforge.optimize(copy.deepcopy(model))
    with torch.no_grad():
        for _ in range(3):
            model(*inputs), fast(*inputs)
        eager, ff = host_us(lambda: model(*inputs)), host_us(lambda: fast(*inputs))
        if profile:
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(200):
                fast(*inputs)
            prof.disable()
            torch.cuda.synchronize()
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        spec = fast.specializations()[0]
        ex = spec.executor
        per_step = []
        for i, run in enumerate(ex._run):

            def timed(env, run=run, i=i):
                torch.cuda.synchronize()
                t = time.perf_counter()
                run(env)
                per_step.append((i, (time.perf_counter() - t) * 1e6))

            ex._run[i] = timed
        fast(*inputs)
    plan = spec.compiled.plan
    kinds = [plan.step_text(s)[:60] for s in plan.run]
    print(f"== {path.split('/')[-1]}: host us/call eager {eager:.0f}, fuseforge {ff:.0f} (steps: {len(kinds)})")
    for (i, us), k in zip(per_step[: len(kinds)], kinds):
        print(f"   step {i:2d} {k:40s} {us:7.1f} us (synced)")
