"""The `fuseforge` command line.

  fuseforge run PROBLEM.py [--mode train|eval] [--train] [--json OUT] [--seeds N] [--eager-convs default|ieee] [--ir]
  fuseforge bench DIR_OR_FILES... [--against eager,inductor] [--train] [--json OUT] [--plot OUT.png] [--eager-convs ...]
  fuseforge emit PROBLEM.py -o model_new.py
  fuseforge explain PROBLEM.py

On a machine with a CUDA GPU, `run` optimizes the problem's model, checks it
against eager (and an fp64 reference) on several random inputs and times
eager, torch.compile and fuseforge side by side. Without a GPU it captures and
optimizes, compiles every kernel with NVRTC for sm_90 and checks the same graph
and kernels at a reduced batch against eager on the CPU, with generated kernels
executed by the reference interpreter (harness/cpu_check.py). Either way it
prints a summary: the verdict with its errors, the times and speedups (GPU),
and the kernels; `--ir` adds the IR as captured and after the passes.
`--train` adds a training step's figures (GPU; harness/train.py).

Every failure is one line on stderr and exit code 2 (--verbose: the traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Sequence
from typing import Any

import torch
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

from fuseforge.diagnostics import counted, one_line, quiet_torch
from fuseforge.harness.problem import build_model, problem_inputs
from fuseforge.harness.roofline import ROOFLINE_LEGEND, roofline_cells


class _Console(Console):
    """rich's Console, except that without a terminal (a pipe, CI logs, the GPU
    machine) text is never wrapped: rich would break lines at 80 columns there,
    in the middle of a verdict or an IR line."""

    def print(self, *objects: Any, soft_wrap: bool | None = None, **kwargs: Any) -> None:
        super().print(*objects, soft_wrap=soft_wrap if soft_wrap is not None else not self.is_terminal, **kwargs)


console = _Console()


def print_full_width(table: Table) -> None:
    """Prints `table` on the console; without a terminal (a pipe, CI logs, the
    GPU machine) rich would squeeze it into 80 columns and cut every cell, so
    it gets its natural width there."""
    if not console.is_terminal:
        natural = console.measure(table, options=console.options.update_width(1 << 16)).maximum
        console.width = max(console.width, natural)
    console.print(table)


def _run_gpu(args: argparse.Namespace) -> dict:
    """Compile times (with --compile-times / --compile-only), the check over
    --seeds inputs and the timings, all on one optimized module of the model:
    each problem is captured and compiled once per process."""
    import fuseforge
    from fuseforge.harness.check import baseline_accuracy, check_correctness
    from fuseforge.harness.measure import compile_inductor, compile_times, time_all, warm_imports
    from fuseforge.harness.problem import problem_name

    mod, model = build_model(args.problem, args.mode, "cuda")
    name = problem_name(args.problem)
    row = {
        "problem": name,
        "mode": "train" if model.training else "eval",
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "precision": args.precision,
    }
    against = args.against.split(",")
    phases = row["phase_s"] = {}  # wall seconds of each phase of this run (where a bench's time goes)
    clock = time.perf_counter()

    def phase_done(phase: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        phases[phase] = now - clock
        clock = now

    with Progress(console=console, transient=True) as progress:
        task = progress.add_task(f"{name}: compiling", total=3)
        inputs = problem_inputs(mod, 1234, "cuda")
        with torch.no_grad():
            model(*inputs)  # CUDA and library initialization, not counted as compile time
        row["import_s"] = warm_imports()
        phase_done("setup")
        if args.compile_times or args.compile_only:
            times, fast = compile_times(model, inputs, args.precision, keep=args.compile_only)
            row.update(times)
        else:
            fast = fuseforge.optimize(model, inputs, precision=args.precision)  # raises if it cannot capture
        phase_done("compile")
        specs = fast.specializations() if fast is not None else []
        if args.ir and specs:
            _print_ir(specs[0].compiled)
        if args.compile_only:
            if "inductor" in against:  # fills inductor's own disk caches, but for its kernels' tuning
                row["inductor_compile_s"] = compile_inductor(model, inputs, args.precision, cache_tuning=False)[1]
                phase_done("inductor_compile")
            if args.train:
                from fuseforge.harness.train import precompile_training

                if args.json:  # kept where the training steps' compile runs past bench's time limit
                    _write_row(args.json, row)
                del fast, inputs  # the inference module and its inputs, before a training step's memory
                row.update(precompile_training(mod, model, against, args.precision) or {})
                phase_done("train_compile")
            return row
        del inputs  # the check draws its own; at most one set of inputs lives at a time
        progress.update(task, advance=1, description=f"{name}: checking")
        row.update(check_correctness(mod, model, args.seeds, "cuda", args.precision, fast=fast))
        phase_done("check")
        progress.update(task, advance=1, description=f"{name}: timing")
        inputs = problem_inputs(mod, 1234, "cuda")
        inductor = None
        if "inductor" in against:
            inductor, row["inductor_compile_s"] = compile_inductor(model, inputs, args.precision)
        row.update(time_all(model, fast, inputs, against, args.precision, inductor))
        del inputs
        phase_done("timing")
        if inductor is not None:  # where its speed comes with an error the rule would not accept from fuseforge
            judged = baseline_accuracy(mod, model, inductor, "cuda", args.precision)
            row.update({f"inductor_{k}": v for k, v in judged.items()})
            phase_done("inductor_check")
        del inductor  # its compiled graphs are not the training step's
        progress.update(task, advance=1)
        if args.train:
            from fuseforge.harness.train import measure_training, problem_copier

            progress.update(task, description=f"{name}: training step")
            make = problem_copier(mod, model, "cuda")
            row["train"] = measure_training(model, make, problem_inputs(mod, 0, "cuda"), against, args.precision)
            phase_done("train")
    table = Table(title=f"fuseforge run — {row['device']}")
    for col in (
        "problem",
        "mode",
        "correct",
        "err vs eager",
        "err vs fp64 (eager's)",
        "eager ms",
        "inductor ms",
        "fuseforge ms",
        "× eager",
        "× inductor",
        "TFLOP/s",
        "roofline",
    ):
        table.add_column(col, justify="left" if col in ("problem", "mode", "correct") else "right")
    fmt = lambda k: f"{row[k]:.3f}" if row.get(k) is not None else "—"  # noqa: E731
    table.add_row(
        name,
        row["mode"],
        "yes" if row["correct"] else "[red]NO[/red]",
        f"{row['max_err_vs_eager']:.2e}",
        f"{row['max_err_vs_fp64']:.2e} ({row['eager_err_vs_fp64']:.2e})",
        fmt("eager_ms"),
        fmt("inductor_ms"),
        fmt("fuseforge_ms"),
        fmt("speedup_vs_eager"),
        fmt("speedup_vs_inductor"),
        *roofline_cells(row),
    )
    table.caption = ROOFLINE_LEGEND
    print_full_width(table)
    console.print(f"verdict: {_verdict_markup(row)}")
    if "inductor_verdict" in row:
        color = "green" if row["inductor_correct"] else "yellow"
        console.print(f"torch.compile, by the same rule: [{color}]{escape(row['inductor_verdict'])}[/{color}]")
    if "train" in row:
        _print_train(name, row["train"])
    if specs:
        plan = specs[0].compiled.plan
        _print_kernels(
            plan,
            {"kernel": [k.name for k in plan.kernels], "vector width": [str(k.vector_width) for k in plan.kernels]},
        )
    return row


def _run_cpu(args: argparse.Namespace) -> dict:
    from fuseforge._native import CPU_CHECK_ARCH, core
    from fuseforge.harness.cpu_check import check_inputs, check_on_cpu, full_plan
    from fuseforge.harness.problem import load_problem, problem_name
    from fuseforge.runtime.options import compile_target

    name = problem_name(args.problem)
    mod = load_problem(args.problem)
    console.print(
        f"[bold]{name}[/bold]: no CUDA GPU here — compiling kernels with NVRTC for target "
        f"{compile_target(CPU_CHECK_ARCH)} and checking the optimized plan on the CPU"
    )
    compiled = full_plan(mod, args.mode, args.precision, CPU_CHECK_ARCH)
    plan = compiled.plan
    if args.ir:
        _print_ir(compiled)
    row: dict[str, Any] = {"problem": name, "device": "cpu", "kernels": []}
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("NVRTC", total=len(plan.kernels))
        sizes: dict[str, int] = {}  # compile key -> cubin bytes: kernels with the same code compile once
        for k in plan.kernels:
            key = k.compile_key
            if key not in sizes:
                _, sizes[key], _ = core.nvrtc_compile(
                    k.translation_unit, k.name, CPU_CHECK_ARCH, cutlass=k.cutlass, sm90a=k.sm90a
                )
            row["kernels"].append({"name": k.name, "cubin_bytes": sizes[key], "vector_width": k.vector_width})
            progress.advance(task)
    _print_kernels(
        plan,
        {
            "kernel": [k["name"] for k in row["kernels"]],
            "vector width": [str(k["vector_width"]) for k in row["kernels"]],
            "cubin bytes": [str(k["cubin_bytes"]) for k in row["kernels"]],
        },
    )
    mod, model, inputs, size = check_inputs(args.problem, args.mode)
    row["mode"] = "train" if model.training else "eval"
    if args.train:
        row["train"] = {"skipped": "no training step: it is measured on a CUDA GPU only"}
    figures, checked = check_on_cpu(model, inputs, args.precision, CPU_CHECK_ARCH)
    row.update(figures)
    row["checked_at"] = {"rows": size.rows, "of": size.full}
    same = [k.name for k in checked.kernels] == [k.name for k in plan.kernels]
    row["checked_kernels_same"] = same
    kernels = counted(len(checked.kernels), "kernel")
    kernels += ", the same as at full size" if same else f" (full size: {len(plan.kernels)})"
    console.print(
        f"optimized plan on the CPU at {size.describe()}: {_verdict_markup(row)}; max abs err vs eager "
        f"{row['max_err_vs_eager']:.2e}, vs fp64 {row['max_err_vs_fp64']:.2e}, eager's "
        f"{row['eager_err_vs_fp64']:.2e} ({kernels}; "
        f"{counted(sum(s.kind == 'call' for s in checked.run), 'library call')})"
    )
    if "train" in row:
        _print_train(name, row["train"])
    return row


def _print_compile_times(args: argparse.Namespace, row: dict) -> None:
    """`run --compile-times`: the seconds of each compile phase with an empty
    kernel cache (fuseforge.phases; on a GPU those of the first call timed as
    compile_s_cold, without one those of a cold compile of the full-size plan
    made for the purpose) and, on a GPU, the first call's with an empty and
    with a filled cache."""
    from fuseforge.phases import ORDER

    if "compile_phases_s" not in row:
        from fuseforge._native import CPU_CHECK_ARCH
        from fuseforge.harness.cpu_check import compile_phases
        from fuseforge.harness.problem import load_problem

        row["compile_phases_s"] = compile_phases(load_problem(args.problem), args.mode, args.precision, CPU_CHECK_ARCH)
    seconds = row["compile_phases_s"]
    table = Table(title="compile phases, empty kernel cache")
    table.add_column("phase")
    table.add_column("s", justify="right")
    for phase in sorted(seconds, key=lambda p: ORDER.index(p) if p in ORDER else len(ORDER)):
        table.add_row(phase, f"{seconds[phase]:.3f}")
    table.add_row("phases in all", f"{sum(seconds.values()):.3f}")
    for key, what in (("compile_s_cold", "first call, empty cache"), ("compile_s_warm", "first call, filled cache")):
        if key in row:
            table.add_row(what, f"{row[key]:.3f}")
    print_full_width(table)


def _verdict_markup(row: dict) -> str:
    """The check's verdict in words (naming the accuracy rule that held), green
    when correct and red when not."""
    color = "green" if row["correct"] else "red"
    return f"[{color}]{escape(row['verdict'])}[/{color}]"


def _print_train(name: str, train: dict[str, Any]) -> None:
    """`run --train`: the training step's figures, or why there are none."""
    from fuseforge.harness.train import train_table

    if "skipped" in train:
        console.print(f"training step: {escape(train['skipped'])}")
        return
    print_full_width(train_table(name, train))
    color = "green" if train["grads_correct"] else "red"
    console.print(f"gradients: [{color}]{escape(str(train['grads_verdict']))}[/{color}]")
    if train.get("inductor_error"):
        console.print(f"[yellow]torch.compile's training step failed: {escape(train['inductor_error'])}[/yellow]")


def _print_ir(compiled: Any) -> None:
    """`run --ir`: the graph as captured and after the passes."""
    console.rule("IR as captured")
    _print_text(compiled.ir_before)
    console.rule("IR after passes")
    _print_text(compiled.ir_after)


def _print_kernels(plan: Any, columns: dict[str, list[str]]) -> None:
    """The plan's kernels, one row each, titled with their count and the
    plan's library calls."""
    calls = sum(s.kind == "call" for s in plan.run)
    table = Table(title=f"{counted(len(plan.kernels), 'kernel')}, {counted(calls, 'library call')}")
    for col in columns:
        table.add_column(col, justify="left" if col == "kernel" else "right")
    for cells in zip(*columns.values()):
        table.add_row(*cells)
    print_full_width(table)


#: `--eager-convs`: cuDNN's f32 conv math for the whole run.
EAGER_CONVS = ("default", "ieee")
EAGER_CONVS_HELP = (
    "cuDNN's f32 conv math for eager, torch.compile and fuseforge's probe of eager: default "
    "(torch's flags: TF32 allowed) or ieee (torch.backends.cudnn.conv.fp32_precision = 'ieee', "
    "as some public suites run eager; fuseforge's convs then keep IEEE f32 accuracy too)"
)


def set_eager_convs(value: str) -> None:
    """Applies `--eager-convs` to this process: "ieee" turns cuDNN's TF32 off,
    so that eager's convs compute in IEEE f32 and fuseforge's probe of them
    (runtime/conv_probe.py) holds its own convs to that; "default" leaves
    torch's flags as they are."""
    if value not in EAGER_CONVS:
        raise ValueError(f"--eager-convs is {value!r}; expected one of {', '.join(EAGER_CONVS)}")
    if value == "ieee":
        # conv is an attribute of the module class torch swaps in at import
        # (PropModule), which its stubs do not show.
        torch.backends.cudnn.conv.fp32_precision = "ieee"  # type: ignore[attr-defined]


#: `--train`.
TRAIN_HELP = (
    "also time and check a training step of a train-mode model with parameters (GPU): forward plus the "
    "backward of the sum of its floating outputs, eager / torch.compile / fuseforge, each parameter's "
    "gradient and the buffers after 3 steps judged like outputs, and peak memory"
)


def _write_row(path: str, row: dict) -> None:
    with open(path, "w") as f:
        json.dump(row, f, indent=2, default=str)


def cmd_run(args: argparse.Namespace) -> int:
    from fuseforge.runtime.precision import check_precision

    check_precision(args.precision)
    set_eager_convs(args.eager_convs)
    if args.compile_only and not torch.cuda.is_available():
        raise ValueError("--compile-only needs a CUDA GPU (it times the first optimized call)")
    row = _run_gpu(args) if torch.cuda.is_available() else _run_cpu(args)
    row["eager_convs"] = args.eager_convs
    if args.compile_times:
        _print_compile_times(args, row)
    if args.json:
        _write_row(args.json, row)
    if args.compile_only:
        return 0
    from fuseforge.harness.train import train_ok

    return 0 if row["correct"] and train_ok(row.get("train")) else 1


def cmd_explain(args: argparse.Namespace) -> int:
    from fuseforge._native import target_arch
    from fuseforge.capture import capture
    from fuseforge.runtime.options import compile_ir, compile_target

    mod, model = build_model(args.problem, args.mode, "cpu")
    captured = capture(model, problem_inputs(mod, 0, "cpu"), name=type(model).__name__)
    # The kernels this machine's GPU would run (without one: those of CPU_CHECK_ARCH),
    # each conv's precision as probed on it (without one: IEEE).
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    arch = target_arch()
    compiled = compile_ir(captured.text, args.precision, arch, trace=True, device=device)
    console.rule("IR as captured")
    _print_text(compiled.ir_before)
    for pass_name, ir in compiled.pass_trace:
        console.rule(f"after {pass_name}")
        _print_text(ir)
    console.rule(f"plan ({args.precision})")
    _print_text(f"target: {compile_target(arch, device)}")
    _print_text(str(compiled.plan))
    _explain_convs(captured.text, compiled.ir_after, device)
    _explain_gemm_fallbacks(compiled.ir_after, args.precision)
    return 0


def _print_text(text: str) -> None:
    """IR or plan text as it is: no markup, no highlighting, lines unwrapped."""
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def _explain_convs(text: str, ir_after: str, device: torch.device) -> None:
    """Each f32 conv's fp32_precision and layout, and the probe behind the precision."""
    from fuseforge._native import core
    from fuseforge.runtime import conv_probe

    rows = [
        (c, after, probe)
        for (c, after), (_, probe) in zip(
            zip(core.convolutions(text), core.convolutions(ir_after)), conv_probe.evidence(text, device)
        )
    ]
    if not rows:
        return
    console.rule("convolutions")
    for c, after, probe in rows:
        layout = "channels-last" if after["channels_last"] else "contiguous"
        if c["dtype"] != "f32":
            why = f"{c['dtype']}: no TF32 question"
        elif probe is None:
            why = "not probed (no GPU here, or a forced or tf32 policy): IEEE unless told otherwise"
        else:
            why = (
                f"eager's conv error vs fp64 {probe['eager_error']:.1e} (rms), TF32's {probe['tf32_error']:.1e}: "
                f"eager {'uses' if probe['tf32'] else 'does not use'} TF32"
            )
        _print_text(f"{c['text']}\n  -> fp32_precision={after['fp32_precision'] or '-'}, {layout}; {why}")


def _explain_gemm_fallbacks(ir_after: str, precision: str) -> None:
    """The matmuls that run as library calls because GEMM kernels cannot be
    compiled here, with the cause and what to install."""
    from fuseforge._native import gemm_headers_missing
    from fuseforge.runtime.options import gemm_fallbacks

    matmuls = gemm_fallbacks(ir_after, precision)
    if not matmuls:
        return
    cause, fix = gemm_headers_missing() or ("", "")
    console.rule("matmuls without GEMM kernels")
    _print_text(f"{cause}; {fix}. Library calls instead of GEMM kernels ({counted(len(matmuls), 'matmul')}):")
    _print_text("\n".join("  " + m for m in matmuls))


def _lazy(module: str, name: str) -> Any:
    """A command function imported only when its command runs."""

    def run(args: argparse.Namespace) -> int:
        import importlib

        return getattr(importlib.import_module(module), name)(args)

    return run


def main(argv: Sequence[str] | None = None) -> int:
    from fuseforge.runtime.precision import PRECISIONS

    precision_help = (
        "numerics policy: fp32 (default; fp32 accuracy, f32 matmuls in 3xTF32) or tf32 (opt-in, "
        "faster: TF32 matmuls, for eager and inductor too)"
    )
    from fuseforge import __version__

    parser = argparse.ArgumentParser(prog="fuseforge", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"fuseforge {__version__} (torch {torch.__version__})")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--verbose", action="store_true", help="on a failure, print the traceback too")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", parents=[common], help="optimize a problem file, check it and time it")
    run.add_argument("problem")
    run.add_argument("--mode", choices=["train", "eval"], help="default: the mode the model is constructed in")
    run.add_argument("--seeds", type=int, default=3, help="random inputs to check (GPU)")
    run.add_argument("--against", default="eager,inductor", help="baselines to time: eager,inductor")
    run.add_argument("--precision", default="fp32", choices=PRECISIONS, help=precision_help)
    run.add_argument("--eager-convs", default="default", choices=EAGER_CONVS, help=EAGER_CONVS_HELP)
    run.add_argument(
        "--compile-times",
        action="store_true",
        help="also each compile phase's seconds with an empty kernel cache (capture, passes, fusion, codegen, "
        "NVRTC, GPU probes) and, on a GPU, the first call's seconds with an empty and with a filled kernel cache",
    )
    run.add_argument(
        "--compile-only",
        action="store_true",
        help="only measure compile times, keep the kernels in the disk cache and, with inductor among "
        "--against, compile it once too: no check, no timing (GPU; `bench --jobs` runs this first)",
    )
    run.add_argument("--train", action="store_true", help=TRAIN_HELP)
    run.add_argument("--ir", action="store_true", help="also print the IR as captured and after the passes")
    run.add_argument("--json", help="write the results to this file")
    run.set_defaults(fn=cmd_run)
    bench = sub.add_parser(
        "bench",
        parents=[common],
        help="run many problem files in a worker process (a fresh one after a failure) and tabulate them",
    )
    bench.add_argument("paths", nargs="*", metavar="DIR_OR_FILES", help="problem files, or folders searched for *.py")
    bench.add_argument("--against", default="eager,inductor", help="baselines to time: eager,inductor")
    bench.add_argument("--mode", choices=["train", "eval"], help="default: each model's own mode")
    bench.add_argument("--precision", default="fp32", choices=PRECISIONS, help="numerics policy (see run)")
    bench.add_argument("--eager-convs", default="default", choices=EAGER_CONVS, help="cuDNN's f32 conv math (see run)")
    bench.add_argument("--seeds", type=int, default=3, help="random inputs to check per problem")
    bench.add_argument("--train", action="store_true", help="also a training step per problem (see run)")
    bench.add_argument("--timeout", type=float, default=300.0, help="seconds per problem before it is killed")
    bench.add_argument(
        "--jobs",
        type=int,
        default=min(8, os.cpu_count() or 1),
        help="problems compiled at a time before the one-by-one check and timing (GPU; 1: one "
        "process per problem does both)",
    )
    bench.add_argument(
        "--gpus",
        type=int,
        help="GPUs to share the problems over, one timing worker each (default: every visible GPU)",
    )
    bench.add_argument("--json", help="write every figure to this file")
    bench.add_argument("--md", help="write the report as a Markdown table")
    bench.add_argument("--plot", help="write a speedup plot (PNG; needs matplotlib)")
    bench.add_argument(
        "--merge",
        nargs="+",
        metavar="JSON",
        help="instead of running: combine --json reports of parts of a suite into one",
    )
    bench.add_argument(
        "--replace",
        action="store_true",
        help="with --merge: a problem a later report measured again replaces its row from an earlier one",
    )
    bench.set_defaults(fn=_lazy("fuseforge.harness.bench", "cmd_bench"))
    emit = sub.add_parser("emit", parents=[common], help="write a standalone ModelNew file (torch only, CUDA inline)")
    emit.add_argument("problem")
    emit.add_argument("-o", "--output", required=True, help="the Python file to write")
    emit.add_argument("--modes", default="train,eval", help="modes to compile plans for (others run eagerly)")
    emit.add_argument(
        "--arch",
        type=int,
        default=None,
        help="compute capability the kernels target, e.g. 80 (default: this machine's GPU, else 90; "
        "a file with Hopper kernels runs Model.forward on other GPUs)",
    )
    emit.add_argument("--precision", default="fp32", choices=PRECISIONS, help="numerics policy (see run)")
    emit.set_defaults(fn=_lazy("fuseforge.harness.emit", "cmd_emit"))
    explain = sub.add_parser("explain", parents=[common], help="print the IR after each pass and the kernel plan")
    explain.add_argument("problem")
    explain.add_argument("--mode", choices=["train", "eval"])
    explain.add_argument("--precision", default="fp32", choices=PRECISIONS, help="numerics policy (see run)")
    explain.set_defaults(fn=cmd_explain)
    args = parser.parse_args(argv)
    try:
        if args.verbose:
            return args.fn(args)
        with quiet_torch():
            return args.fn(args)
    except KeyboardInterrupt:
        raise
    except Exception as e:  # every failure: one line naming it (the traceback with --verbose), exit 2
        if args.verbose:
            print(getattr(e, "details", ""), end="", file=sys.stderr)  # what torch printed while it failed
            traceback.print_exc()
        more = "" if args.verbose else " (--verbose shows the traceback)"
        print(f"fuseforge {args.command}: {one_line(e, getattr(args, 'problem', None))}{more}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
