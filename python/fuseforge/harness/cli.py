"""The `fuseforge` command line.

  fuseforge run PROBLEM.py [--mode train|eval] [--json OUT] [--seeds N]
  fuseforge bench DIR_OR_FILES... [--against eager,inductor] [--json OUT] [--plot OUT.png]
  fuseforge emit PROBLEM.py -o model_new.py
  fuseforge explain PROBLEM.py

On a machine with a CUDA GPU, `run` optimizes the problem's model, checks it
against eager (and an fp64 reference) on several random inputs and times
eager, torch.compile and fuseforge side by side. Without a GPU it captures and
optimizes, prints the IR before and after the passes, compiles every kernel
with NVRTC for sm_90 and checks the optimized plan against eager on the CPU,
with generated kernels executed by the reference interpreter.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time
from typing import Any, Sequence

import torch
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from fuseforge.harness.roofline import ROOFLINE_LEGEND, roofline_cells

console = Console()


def _flatten(x: Any) -> list[torch.Tensor]:
    from torch.utils import _pytree as pytree
    return [t for t in pytree.tree_leaves(x) if isinstance(t, torch.Tensor)]


def _build(problem_path: str, mode: str | None, device: str):
    from fuseforge.harness.problem import load_problem
    mod = load_problem(problem_path)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs())
    if mode is not None:
        model.train(mode == "train")
    return mod, model.to(device)


def _inputs(mod: Any, seed: int, device: str, dtype: torch.dtype | None = None) -> list[Any]:
    torch.manual_seed(seed)
    out = []
    for x in mod.get_inputs():
        if isinstance(x, torch.Tensor):
            x = x.to(device)
            if dtype is not None and x.is_floating_point():
                x = x.to(dtype)
        out.append(x)
    return out


def _max_err(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
    err = 0.0
    for x, y in zip(a, b):
        if x.shape != y.shape:
            return float("inf")
        d = (x.double() - y.double()).abs()
        d = torch.where(torch.isnan(x.double()) & torch.isnan(y.double()), torch.zeros_like(d), d)
        err = max(err, float(d.max()) if d.numel() else 0.0)
    return err


def _close(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], tol: float = 1e-4) -> bool:
    return len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype and torch.allclose(x.double(), y.double(), rtol=tol, atol=tol, equal_nan=True)
        for x, y in zip(a, b))


def _buffers(model: torch.nn.Module) -> list[torch.Tensor]:
    return [b.detach().clone() for _, b in sorted(model.named_buffers())]


def _judge(out: Sequence[torch.Tensor], ref: Sequence[torch.Tensor], ref64: Sequence[torch.Tensor],
           out_buf: Sequence[torch.Tensor], ref_buf: Sequence[torch.Tensor]) -> tuple[bool, float, float, float]:
    """(correct, error vs eager, error vs fp64, eager's error vs fp64). Correct:
    outputs and updated buffers within 1e-4 of eager; where eager itself is far
    from fp64 (fp16 models, TF32 convs, long fp32 sums) the output bar is being
    no worse than twice eager's error against fp64."""
    err, err64, eager64 = _max_err(out, ref), _max_err(out, ref64), _max_err(ref, ref64)
    buffers_ok = _close(out_buf, ref_buf)
    ok = buffers_ok and (_close(out, ref) or (all(o.dtype == r.dtype for o, r in zip(out, ref))
                                              and err64 <= 2 * eager64 + 1e-6))
    return ok, err, err64, eager64


def _fp64_reference(mod: Any, model: torch.nn.Module, state: dict, seed: int, device: str) -> list[torch.Tensor]:
    """Outputs of a float64 copy of `model` with `state` loaded, on the seed's inputs."""
    m64 = copy.deepcopy(model)
    m64.load_state_dict(state)
    m64 = m64.double()
    with torch.no_grad():
        return _flatten(m64(*_inputs(mod, seed, device, torch.float64)))


def check_correctness(mod: Any, model: torch.nn.Module, seeds: int, device: str, precision: str = "fp32") -> dict:
    """Compares fuseforge with eager (outputs and updated buffers) and both with
    an fp64 reference, over `seeds` fresh random inputs, each from the same state.
    Eager runs under the same precision policy (TF32 matmuls under "tf32"), so
    the bar for a faster policy is eager's own error at that policy."""
    import fuseforge
    from fuseforge.runtime.module import precision_context
    snapshot = copy.deepcopy(model.state_dict())
    fast = fuseforge.optimize(copy.deepcopy(model), precision=precision)
    result = {"correct": True, "max_err_vs_eager": 0.0, "max_err_vs_fp64": 0.0, "eager_err_vs_fp64": 0.0}
    for seed in range(seeds):
        inputs = _inputs(mod, seed, device)
        model.load_state_dict(snapshot)
        fast.load_state_dict(snapshot)
        with torch.no_grad(), precision_context(precision):
            ref = _flatten(model(*inputs))
            out = _flatten(fast(*inputs))
        ref_buf, out_buf = _buffers(model), _buffers(fast)
        ref64 = _fp64_reference(mod, model, snapshot, seed, device)
        ok, err, err64, eager64 = _judge(out, ref, ref64, out_buf, ref_buf)
        result["correct"] &= ok
        result["max_err_vs_eager"] = max(result["max_err_vs_eager"], err)
        result["max_err_vs_fp64"] = max(result["max_err_vs_fp64"], err64)
        result["eager_err_vs_fp64"] = max(result["eager_err_vs_fp64"], eager64)
    return result


def compile_times(mod: Any, model: torch.nn.Module, precision: str = "fp32", keep: bool = False) -> dict:
    """Seconds of the first optimized call (capture, passes, NVRTC, module
    load), once with an empty kernel cache (compile_s_cold) and once more in a
    new OptimizedModule with the disk cache that the first filled and this
    process's in-memory kernels forgotten (compile_s_warm). Eager runs once
    before, so CUDA and library initialization are not counted. `keep` copies
    the kernels compiled into the real disk cache, so later runs find them."""
    import shutil

    import fuseforge
    from fuseforge._native import core
    inputs = _inputs(mod, 1234, "cuda")
    out: dict[str, Any] = {}
    saved = os.environ.get("FUSEFORGE_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="fuseforge-cold-") as cache, torch.no_grad():
        os.environ["FUSEFORGE_CACHE_DIR"] = cache
        try:
            model(*inputs)
            for key in ("compile_s_cold", "compile_s_warm"):
                core.clear_memory_cache()
                fast = fuseforge.optimize(copy.deepcopy(model), precision=precision)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                fast(*inputs)
                torch.cuda.synchronize()
                out[key] = time.perf_counter() - t0
        finally:
            if saved is None:
                os.environ.pop("FUSEFORGE_CACHE_DIR", None)
            else:
                os.environ["FUSEFORGE_CACHE_DIR"] = saved
        if keep and core.cache_dir():
            shutil.copytree(cache, core.cache_dir(), dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("autotune.json"))
    return out


def time_all(mod: Any, model: torch.nn.Module, against: list[str], precision: str = "fp32") -> dict:
    """Median cold-L2 milliseconds of eager, torch.compile (inductor) and
    fuseforge, timed interleaved (fuseforge.harness.timing), and fuseforge's roofline
    estimate (fuseforge.harness.roofline); all three under the same precision policy."""
    import fuseforge
    from fuseforge.runtime.module import precision_context
    from fuseforge.harness.roofline import roofline
    from fuseforge.harness.timing import time_cuda
    inputs = _inputs(mod, 1234, "cuda")
    out: dict[str, Any] = {}
    with torch.no_grad(), precision_context(precision):
        fast = fuseforge.optimize(copy.deepcopy(model), precision=precision)
        t0 = time.perf_counter()
        fast(*inputs)
        torch.cuda.synchronize()
        out["compile_s"] = time.perf_counter() - t0
        fns = {"fuseforge": lambda: fast(*inputs)}
        if "eager" in against:
            fns["eager"] = lambda: model(*inputs)
        if "inductor" in against:
            compiled = torch.compile(copy.deepcopy(model))
            compiled(*inputs)  # compiles outside the timed rounds
            fns["inductor"] = lambda: compiled(*inputs)
        out.update({f"{name}_ms": ms for name, ms in time_cuda(fns).items()})
        specs = fast.specializations()
        if specs:  # none when the model could not be captured and ran eagerly
            out.update(roofline(specs[0].plan, torch.cuda.get_device_name(), out["fuseforge_ms"], precision))
    for ref in ("eager", "inductor"):
        if f"{ref}_ms" in out:
            out[f"speedup_vs_{ref}"] = out[f"{ref}_ms"] / out["fuseforge_ms"]
    return out


def _run_gpu(args: argparse.Namespace) -> dict:
    from fuseforge.harness.problem import problem_name
    mod, model = _build(args.problem, args.mode, "cuda")
    name = problem_name(args.problem)
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task(f"{name}: checking", total=2)
        row = {"problem": name, "mode": "train" if model.training else "eval", "device": torch.cuda.get_device_name(),
               "torch": torch.__version__, "precision": args.precision}
        if args.compile_times or args.compile_only:
            progress.update(task, description=f"{name}: compile times")
            row.update(compile_times(mod, model, args.precision, keep=args.compile_only))
        if args.compile_only:
            if "inductor" in args.against.split(","):  # fills inductor's own disk caches
                from fuseforge.runtime.module import precision_context
                with torch.no_grad(), precision_context(args.precision):
                    torch.compile(copy.deepcopy(model))(*_inputs(mod, 1234, "cuda"))
            return row
        progress.update(task, description=f"{name}: checking")
        row.update(check_correctness(mod, model, args.seeds, "cuda", args.precision))
        progress.update(task, advance=1, description=f"{name}: timing")
        row.update(time_all(mod, model, args.against.split(","), args.precision))
        progress.update(task, advance=1)
    table = Table(title=f"fuseforge run — {row['device']}")
    for col in ("problem", "mode", "correct", "err vs eager", "err vs fp64 (eager's)", "eager ms",
                "inductor ms", "fuseforge ms", "× eager", "× inductor", "TFLOP/s", "roofline"):
        table.add_column(col, justify="left" if col in ("problem", "mode", "correct") else "right")
    fmt = lambda k: f"{row[k]:.3f}" if row.get(k) is not None else "—"  # noqa: E731
    table.add_row(name, row["mode"], "yes" if row["correct"] else "[red]NO[/red]", f"{row['max_err_vs_eager']:.2e}",
                  f"{row['max_err_vs_fp64']:.2e} ({row['eager_err_vs_fp64']:.2e})", fmt("eager_ms"), fmt("inductor_ms"),
                  fmt("fuseforge_ms"), fmt("speedup_vs_eager"), fmt("speedup_vs_inductor"), *roofline_cells(row))
    table.caption = ROOFLINE_LEGEND
    console.print(table)
    return row


def _run_cpu(args: argparse.Namespace) -> dict:
    from fuseforge._native import CPU_CHECK_ARCH, core
    from fuseforge.capture import capture
    from fuseforge.runtime.executor import Executor
    from fuseforge.harness.problem import problem_name
    mod, model = _build(args.problem, args.mode, "cpu")
    name = problem_name(args.problem)
    console.print(f"[bold]{name}[/bold]: no CUDA GPU here — compiling kernels with NVRTC (sm_{CPU_CHECK_ARCH}) "
                  "and checking the optimized plan on the CPU")
    inputs = _inputs(mod, 0, "cpu")
    captured = capture(model, inputs, name=type(model).__name__)
    plan = core.compile_graph(captured.text, precision=args.precision, arch=CPU_CHECK_ARCH)
    console.rule("IR as captured")
    console.print(plan["ir_before"], markup=False, highlight=False)
    console.rule("IR after passes")
    console.print(plan["ir_after"], markup=False, highlight=False)
    row: dict[str, Any] = {"problem": name, "mode": "train" if model.training else "eval", "device": "cpu",
                           "kernels": []}
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("NVRTC", total=len(plan["kernels"]))
        for k in plan["kernels"]:
            is_cubin, size, _ = core.nvrtc_compile(k["source"], k["name"], CPU_CHECK_ARCH, cutlass=k["cutlass"],
                                                   sm90a=k["sm90a"])
            row["kernels"].append({"name": k["name"], "cubin_bytes": size, "vector_width": k["vector_width"]})
            progress.advance(task)
    table = Table(title="kernels")
    for col in ("kernel", "vector width", "cubin bytes"):
        table.add_column(col)
    for k in row["kernels"]:
        table.add_row(k["name"], str(k["vector_width"]), str(k["cubin_bytes"]))
    console.print(table)
    # The plan on the CPU: library ops through ATen, kernels on the interpreter.
    snapshot = copy.deepcopy(model.state_dict())
    executor = Executor(plan, torch.device("cpu"))
    ir_inputs = captured.graph_inputs(model, inputs)
    with torch.no_grad():
        outs, new_buffers = executor(ir_inputs)
        reference = copy.deepcopy(model)
        ref = _flatten(reference(*inputs))
    ref_buffers = dict(reference.named_buffers())
    want_buffers = [ref_buffers[n] for n, _ in captured.mutations]
    ref64 = _fp64_reference(mod, model, snapshot, 0, "cpu")
    row["correct"], row["max_err_vs_eager"], row["max_err_vs_fp64"], row["eager_err_vs_fp64"] = _judge(
        outs, ref, ref64, list(new_buffers), want_buffers)
    verdict = "[green]is correct[/green]" if row["correct"] else "[red]is WRONG[/red]"
    console.print(f"optimized plan on the CPU {verdict} (max abs err {row['max_err_vs_eager']:.2e}; vs fp64 "
                  f"{row['max_err_vs_fp64']:.2e}, eager's {row['eager_err_vs_fp64']:.2e}; "
                  f"{len(plan['kernels'])} kernels, {sum(s['kind'] == 'node' for s in plan['steps'])} library calls)")
    return row


def cmd_run(args: argparse.Namespace) -> int:
    from fuseforge.runtime.module import check_precision
    check_precision(args.precision)
    if args.compile_only and not torch.cuda.is_available():
        raise ValueError("--compile-only needs a CUDA GPU (it times the first optimized call)")
    row = _run_gpu(args) if torch.cuda.is_available() else _run_cpu(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(row, f, indent=2, default=str)
    return 0 if args.compile_only or row["correct"] else 1


def cmd_explain(args: argparse.Namespace) -> int:
    from fuseforge._native import core, target_arch
    from fuseforge.capture import capture
    mod, model = _build(args.problem, args.mode, "cpu")
    captured = capture(model, _inputs(mod, 0, "cpu"), name=type(model).__name__)
    # The kernels this machine's GPU would run (without one: those of CPU_CHECK_ARCH).
    plan = core.compile_graph(captured.text, trace=True, arch=target_arch())
    console.rule("IR as captured")
    console.print(plan["ir_before"], markup=False, highlight=False)
    for pass_name, ir in plan["pass_trace"]:
        console.rule(f"after {pass_name}")
        console.print(ir, markup=False, highlight=False)
    console.rule("plan")
    for step in plan["steps"]:
        if step["kind"] == "kernel":
            k = plan["kernels"][step["kernel"]]
            console.print(f"kernel  {k['name']}  ({len(k['nodes'])} ops fused, {k['vector_width']}-wide)")
        else:
            console.print(f"library {step['text']}", markup=False, highlight=False)
    return 0


#: --precision choices; fuseforge.runtime.module.check_precision says which are implemented.
PRECISIONS = ("fp32", "tf32", "bf16")


def _lazy(module: str, name: str) -> Any:
    """A command function imported only when its command runs."""
    def run(args: argparse.Namespace) -> int:
        import importlib
        return getattr(importlib.import_module(module), name)(args)
    return run


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fuseforge", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="optimize a problem file, check it and time it")
    run.add_argument("problem")
    run.add_argument("--mode", choices=["train", "eval"], help="default: the mode the model is constructed in")
    run.add_argument("--seeds", type=int, default=3, help="random inputs to check (GPU)")
    run.add_argument("--against", default="eager,inductor", help="baselines to time: eager,inductor")
    run.add_argument("--precision", default="fp32", choices=PRECISIONS,
                     help="numerics policy: fp32 (default; fp32 accuracy, f32 matmuls in 3xTF32) or tf32 "
                          "(opt-in, faster: TF32 matmuls, for eager and inductor too); bf16 is not implemented yet")
    run.add_argument("--compile-times", action="store_true",
                     help="also measure the first call's seconds with an empty and with a filled kernel cache (GPU)")
    run.add_argument("--compile-only", action="store_true",
                     help="only measure compile times, keep the kernels in the disk cache and, with inductor among "
                          "--against, compile it once too: no check, no timing (GPU; `bench --jobs` runs this first)")
    run.add_argument("--json", help="write the results to this file")
    run.set_defaults(fn=cmd_run)
    bench = sub.add_parser("bench", help="run many problem files, each in its own process, and tabulate them")
    bench.add_argument("paths", nargs="*", metavar="DIR_OR_FILES", help="problem files, or folders searched for *.py")
    bench.add_argument("--against", default="eager,inductor", help="baselines to time: eager,inductor")
    bench.add_argument("--mode", choices=["train", "eval"], help="default: each model's own mode")
    bench.add_argument("--precision", default="fp32", choices=PRECISIONS, help="numerics policy (see run)")
    bench.add_argument("--seeds", type=int, default=3, help="random inputs to check per problem")
    bench.add_argument("--timeout", type=float, default=300.0, help="seconds per problem before it is killed")
    bench.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1),
                       help="problems compiled at a time before the one-by-one check and timing (GPU; 1: one "
                            "process per problem does both)")
    bench.add_argument("--json", help="write every figure to this file")
    bench.add_argument("--plot", help="write a speedup plot (PNG; needs matplotlib)")
    bench.add_argument("--merge", nargs="+", metavar="JSON",
                       help="instead of running: combine --json reports of parts of a suite into one")
    bench.set_defaults(fn=_lazy("fuseforge.harness.bench", "cmd_bench"))
    emit = sub.add_parser("emit", help="write a standalone ModelNew file (torch only, CUDA inline)")
    emit.add_argument("problem")
    emit.add_argument("-o", "--output", required=True, help="the Python file to write")
    emit.add_argument("--modes", default="train,eval", help="modes to compile plans for (others run eagerly)")
    emit.add_argument("--arch", type=int, default=None,
                      help="compute capability the kernels target, e.g. 80 (default: this machine's GPU, else 90; "
                           "a file with Hopper kernels runs Model.forward on other GPUs)")
    emit.set_defaults(fn=_lazy("fuseforge.emit", "cmd_emit"))
    explain = sub.add_parser("explain", help="print the IR after each pass and the kernel plan")
    explain.add_argument("problem")
    explain.add_argument("--mode", choices=["train", "eval"])
    explain.set_defaults(fn=cmd_explain)
    args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except (FileNotFoundError, ValueError) as e:
        console.print(f"[red]fuseforge: {e}[/red]")
        return 2


if __name__ == "__main__":
    sys.exit(main())
