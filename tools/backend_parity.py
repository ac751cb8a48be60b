"""Inference through `torch.compile(model, backend="fuseforge")` against
`fuseforge.optimize(model)` on the same model and inputs: milliseconds of
each (cold L2, CUDA events, median, interleaved: runtime/timing.py), how
far apart their outputs are, how many graphs the backend compiled and
whether each side replays a CUDA graph.

    python tools/backend_parity.py PROBLEM.py [PROBLEM.py ...] [--gpus N] [--jobs J] [--allow-rnn]
    python tools/backend_parity.py PROBLEM.py [PROBLEM.py ...] --isolate [--gpus N] [--jobs J] [--allow-rnn]

With --gpus/--jobs the problems are shared out over J processes per GPU.
Each process compiles all of its problems first; timing starts only when
every process has compiled, and one process at a time times on each GPU, so
neither compiles nor a neighbour's kernels fall inside a measurement. The
first call of each model, though, is where its plan times its own choices
(GEMM tiles, cuDNN against our conv kernels, a CUDA graph against the
step-by-step run): with J > 1 those run beside other processes' work on the
GPU, so figures to quote take --jobs 1. With --isolate each problem runs in
a process of its own, J per GPU at a time (one of them timing): a process
that holds every problem's compiled models times the backend's calls
slower (38 of 51 dev and seed problems within 5 % of optimize on an H200,
where the same problems held a few to a process were at parity).
"""

from __future__ import annotations

import argparse
import copy
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import torch

import fuseforge
from fuseforge.harness.problem import build_model, problem_inputs
from fuseforge.runtime import training
from fuseforge.runtime.timing import time_cuda


def _max_diff(a: object, b: object) -> float:
    leaves = zip(torch.utils._pytree.tree_leaves(a), torch.utils._pytree.tree_leaves(b))
    return max(
        ((x.double() - y.double()).abs().max().item() for x, y in leaves if isinstance(x, torch.Tensor) and x.numel()),
        default=0.0,
    )


def _measure(problems: list[str], sync_dir: str | None, workers: int) -> dict[str, dict]:
    built, rows = [], {}
    for problem in problems:
        name = os.path.basename(problem)
        try:
            mod, model = build_model(problem, None, "cuda")
            inputs = problem_inputs(mod, 0, "cuda")
            optimized = fuseforge.optimize(copy.deepcopy(model))
            compiled = torch.compile(copy.deepcopy(model), backend="fuseforge")
            before = set(training._LIVE)
            with torch.no_grad():
                diff = _max_diff(optimized(*inputs), compiled(*inputs))  # the first calls compile
                compiled(*inputs)  # a backend graph decides its CUDA graph replay at its second call
            # Graphs the backend compiled: none where dynamo ran the code eagerly (an RNN module, by default).
            new = [g for g in training._LIVE if g not in before and g.kind == "inference"]
            graphs = len(new)
            # Whether each side replays a CUDA graph, as timing decided (optimize at its first call).
            replays = {
                "optimize_replays": any(s.graphed for s in optimized.specializations()),
                "backend_replays": any(g.graphed for g in new),
            }
        except Exception as e:  # noqa: BLE001 - one problem's failure is its row, not the run's end
            rows[name] = {"error": f"{type(e).__name__}: {e}".splitlines()[0]}
            print(f"{name}: {rows[name]['error']}", file=sys.stderr, flush=True)
            continue
        built.append((name, optimized, compiled, inputs, diff, graphs, replays))
    lock = None
    if sync_dir is not None:
        open(os.path.join(sync_dir, f"compiled-{os.getpid()}"), "w").close()
        while sum(n.startswith("compiled-") for n in os.listdir(sync_dir)) < workers:
            time.sleep(0.5)
        lock = open(os.path.join(sync_dir, f"gpu-{os.environ.get('CUDA_VISIBLE_DEVICES', '')}.lock"), "w")
        fcntl.flock(lock, fcntl.LOCK_EX)
    for name, optimized, compiled, inputs, diff, graphs, replays in built:
        with torch.no_grad():
            ms = time_cuda({"optimize": lambda: optimized(*inputs), "backend": lambda: compiled(*inputs)})
        rows[name] = {**{k: round(v, 4) for k, v in ms.items()}, "ratio": round(ms["backend"] / ms["optimize"], 3)}
        rows[name].update(max_abs_diff=diff, backend_graphs=graphs, **replays)
        print(
            f"{name}: optimize {ms['optimize']:.4f} ms, backend {ms['backend']:.4f} ms "
            f"({rows[name]['ratio']:.2f}x), outputs differ by {diff:.1e}, {graphs} backend graph(s), "
            f"CUDA graph replay: optimize {replays['optimize_replays']}, backend {replays['backend_replays']}",
            file=sys.stderr,
            flush=True,
        )
    if lock is not None:
        lock.close()
    return rows


def _share_out(problems: list[str], gpus: int, jobs: int, allow_rnn: bool) -> dict[str, dict]:
    workers = min(len(problems), gpus * jobs)
    rows: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="ff-backend-parity-") as sync_dir:
        # Each worker's stdout goes to a file: the parent polls them all for
        # the barrier rather than reading, and a full pipe would block a worker.
        outputs = [os.path.join(sync_dir, f"rows-{w}.json") for w in range(workers)]
        procs = []
        for w, output in enumerate(outputs):
            with open(output, "w") as out:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, __file__, "--sync-dir", sync_dir, "--workers", str(workers)]
                        + (["--allow-rnn"] if allow_rnn else [])
                        + problems[w::workers],
                        env={**os.environ, "CUDA_VISIBLE_DEVICES": str(w % gpus)},
                        stdout=out,
                    )
                )
        running = list(procs)
        while running:
            for proc in [p for p in running if p.poll() is not None]:
                # A worker that ended before the barrier (it crashed) must not hold the others there.
                open(os.path.join(sync_dir, f"compiled-{proc.pid}"), "w").close()
                running.remove(proc)
            time.sleep(0.5)
        for proc, output in zip(procs, outputs):
            if proc.returncode != 0:
                raise SystemExit(f"backend_parity: a worker failed (exit {proc.returncode})")
            with open(output) as out:
                rows.update(json.loads(out.read().strip().splitlines()[-1]))
    return {os.path.basename(p): rows[os.path.basename(p)] for p in problems}


def _isolated(problems: list[str], gpus: int, jobs: int, allow_rnn: bool) -> dict[str, dict]:
    """Each problem in a process of its own, gpus * jobs of them at a time;
    they share one lock per GPU, so one process at a time times on each."""
    with tempfile.TemporaryDirectory(prefix="ff-backend-parity-") as sync_dir:

        def measure(index: int, problem: str) -> dict[str, dict]:
            argv = [sys.executable, __file__, "--sync-dir", sync_dir, problem] + (["--allow-rnn"] if allow_rnn else [])
            env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(index % gpus)}
            run = subprocess.run(argv, env=env, stdout=subprocess.PIPE, text=True)
            if run.returncode == 0 and run.stdout.strip():
                return json.loads(run.stdout.strip().splitlines()[-1])
            return {os.path.basename(problem): {"error": f"exit code {run.returncode}"}}

        with ThreadPoolExecutor(gpus * jobs) as pool:
            results = list(pool.map(measure, range(len(problems)), problems))
    return {name: row for result in results for name, row in result.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("problems", nargs="+")
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=1, help="processes per GPU")
    parser.add_argument(
        "--isolate", action="store_true", help="each problem in a process of its own (--gpus x --jobs at a time)"
    )
    parser.add_argument(
        "--allow-rnn",
        action="store_true",
        help="set torch._dynamo.config.allow_rnn: dynamo hands RNN modules to the backend (by default it runs them)",
    )
    parser.add_argument("--sync-dir", help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.allow_rnn:
        torch._dynamo.config.allow_rnn = True
    if args.isolate:
        rows = _isolated(args.problems, args.gpus, args.jobs, args.allow_rnn)
    elif args.sync_dir is None and args.gpus * args.jobs > 1:
        rows = _share_out(args.problems, args.gpus, args.jobs, args.allow_rnn)
    else:
        rows = _measure(args.problems, args.sync_dir, args.workers)
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
