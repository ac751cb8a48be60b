"""GPU facts about the suite's convolutions, printed as four tables.

    python tools/conv_probe.py [--problems DIR_OR_FILES...] [--sections ABCD] [--json OUT.json]

A. Precision and layout, per conv of every problem: eager's own conv (as
   captured: NCHW) error against fp64, the error TF32 math itself brings, and
   so whether eager's conv computes in TF32 (fuseforge's probe decision);
   errors of the same conv channels-last with TF32 allowed (what the old
   conv_channels_last pass ran) and in IEEE fp32; times of both layouts under
   eager's flags and under IEEE; fuseforge's decision (fp32_precision, layout).
   Success: "ff math" is tf32 only where "eager tf32" is yes, and every
   "ff err/eager" is at most 2.
B. Root cause, per problem whose captured graph has a 2-D conv feeding only
   pointwise ops (the class that failed outside) and mode: fuseforge's error
   against fp64 over eager's, (new) as built, (old) every f32 conv allowed
   TF32 as the old pass did, (off) conv_engine off with TF32 allowed as eager.
   Success: "old" above 2 where eager's conv is fp32 (the failure), "off" and
   "new" at most 2.
C. Generated conv kernels against cuDNN, per forward 2-D or 3-D conv without groups:
   milliseconds of our implicit-GEMM kernel (fused relu, the decided math)
   and of cuDNN's channels-last conv + relu, TFLOP/s, error against fp64 over
   eager's. Success: errors within 2x; where "kernel ms" < "cudnn ms" the
   cost model's choice (FUSEFORGE_CONV_KERNELS=auto) should be the kernel.
D. The cost model against the GPU, per conv signature and engine (cuDNN
   contiguous, cuDNN channels-last, our implicit-GEMM kernel, our direct
   kernel): the modelled milliseconds (core.convolutions' model_ms, the
   decided math, nothing timed) beside the timed ones (cuDNN's conv alone;
   the implicit GEMM as in C, its relu fused; the direct kernel as the
   front end's probe times it), and per engine the median modelled/timed
   ratio and the median and worst error (max(modelled/timed, timed/modelled)):
   how far a decision by the model alone can be off.

Errors are max |y - y64| over the first batch sample (A, C) or the whole
output (B). Runs in under 4 minutes on an H100 (it stops starting new work
after --budget seconds and says so).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path

import torch

from fuseforge._native import core
from fuseforge.capture import capture
from fuseforge.harness.bench import find_problems
from fuseforge.harness.check import fp64_run
from fuseforge.harness.compare import flatten_tensors
from fuseforge.harness.problem import build_model, load_problem, problem_inputs, problem_name
from fuseforge.runtime import conv_probe, options
from fuseforge.runtime.precision import conv_fp32_precision, eager_conv_precision
from fuseforge.runtime.timing import time_cuda

DEV = torch.device("cuda")
START = time.perf_counter()


def out_of_time(budget: float) -> bool:
    return time.perf_counter() - START > budget


def conv_call(c: dict, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.ops.aten.convolution.default(
        x, w, None, c["stride"], c["padding"], c["dilation"], c["transposed"], c["output_padding"], c["groups"]
    )


def max_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y.double() - ref).abs().max())


def kind(c: dict) -> str:
    dims = len(c["input"][1]) - 2
    return f"{dims}d" + ("T" if c["transposed"] else "") + (f"g{c['groups']}" if c["groups"] > 1 else "")


def captured_convs(path: Path, mode: str) -> tuple[str, list[dict]]:
    mod = load_problem(str(path))
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs()).train(mode == "train")
    text = capture(model, mod.get_inputs(), name=problem_name(path)).text
    return text, core.convolutions(text)


def decided(text: str) -> dict[str, tuple[str, bool]]:
    """Per captured conv signature: fuseforge's fp32_precision and whether it
    runs channels-last (passes keep the convs' order)."""
    compiled = options.compile_ir(text, "fp32", device=DEV)
    return {
        c["signature"]: (after["fp32_precision"] or "-", after["channels_last"])
        for c, after in zip(core.convolutions(text), core.convolutions(compiled.ir_after))
    }


def section_a(paths: list[Path], budget: float) -> list[dict]:
    print("\nA. precision and layout per conv (errors: max abs vs fp64, first sample; times: ms, cold L2)")
    cols = [
        "problem",
        "conv",
        "x",
        "w",
        "eager err",
        "tf32 err",
        "eager tf32",
        "nhwc tf32-ok err",
        "nhwc ieee err",
        "nchw ms",
        "nhwc ms",
        "nchw ieee ms",
        "nhwc ieee ms",
        "ff math",
        "ff layout",
        "ff err/eager",
    ]
    print(" | ".join(cols))
    rows, seen = [], set()
    for path in paths:
        text, convs = captured_convs(path, "eval")
        choice = decided(text)
        for c in convs:
            if c["signature"] in seen:
                continue
            seen.add(c["signature"])
            if out_of_time(budget):
                print(f"(stopped: over the {budget:.0f} s budget)")
                return rows
            with torch.no_grad():
                x, w = conv_probe.operands(c, DEV)
                ref = conv_call(c, x[:1].double(), w.double())
                fmt = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
                xl, wl = x.contiguous(memory_format=fmt), w.contiguous(memory_format=fmt)
                probe = conv_probe.measure_precision(c, DEV)
                eager = max_err(conv_call(c, x, w)[:1], ref)
                nhwc = max_err(conv_call(c, xl, wl)[:1], ref)
                with conv_fp32_precision("ieee"):
                    nhwc_ieee = max_err(conv_call(c, xl, wl)[:1], ref)
                math, cl = choice.get(c["signature"], ("-", False))
                with conv_fp32_precision(math if math != "-" else eager_conv_precision()):
                    ours = max_err(conv_call(c, xl if cl else x, wl if cl else w)[:1], ref)
                t = time_cuda({"nchw": lambda: conv_call(c, x, w), "nhwc": lambda: conv_call(c, xl, wl)}, trials=10)
                with conv_fp32_precision("ieee"):
                    ti = time_cuda(
                        {"nchw": lambda: conv_call(c, x, w), "nhwc": lambda: conv_call(c, xl, wl)}, trials=10
                    )
            row = {
                "problem": problem_name(path),
                "conv": kind(c),
                "x": c["input"][1],
                "w": c["weight"][1],
                "eager_err": eager,
                "tf32_rms_err": probe["tf32_error"],
                "eager_rms_err": probe["eager_error"],
                "eager_tf32": probe["tf32"],
                "nhwc_err": nhwc,
                "nhwc_ieee_err": nhwc_ieee,
                "nchw_ms": t["nchw"],
                "nhwc_ms": t["nhwc"],
                "nchw_ieee_ms": ti["nchw"],
                "nhwc_ieee_ms": ti["nhwc"],
                "ff_math": math,
                "ff_channels_last": cl,
                "ff_err_over_eager": ours / max(eager, 1e-30),
            }
            rows.append(row)
            print(
                " | ".join(
                    [
                        row["problem"],
                        row["conv"],
                        "x".join(map(str, c["input"][1])),
                        "x".join(map(str, c["weight"][1])),
                        f"{eager:.1e}",
                        f"{probe['tf32_error']:.1e} rms",
                        "yes" if probe["tf32"] else "no",
                        f"{nhwc:.1e}",
                        f"{nhwc_ieee:.1e}",
                        f"{t['nchw']:.3f}",
                        f"{t['nhwc']:.3f}",
                        f"{ti['nchw']:.3f}",
                        f"{ti['nhwc']:.3f}",
                        math,
                        "channels-last" if cl else "contiguous",
                        f"{row['ff_err_over_eager']:.2f}",
                    ]
                )
            )
    return rows


def _pointwise_fed_2d(text: str) -> bool:
    """Whether some 2-D conv's result is read by pointwise ops only (the old pass's criterion)."""
    plan = options.compile_ir(text, passes=["cse"]).plan
    readers: dict[int, list[str]] = {}
    for s in plan.run:
        for o in s.operands if s.kind in ("call", "view") else []:
            readers.setdefault(o.buffer, []).append("library")
    for k in plan.kernels:
        for i in k.inputs:
            readers.setdefault(i.memory, []).append("kernel")
    for s in plan.run:
        if s.kind == "call" and s.op == "convolution" and len(plan.buffers[s.results[0]].shape) == 4:
            r = readers.get(s.results[0], [])
            if r and all(x == "kernel" for x in r) and s.results[0] not in plan.outputs:
                return True
    return False


def _with_compile_args(extra: dict):
    """compile_options with `extra` keyword arguments (the variants of B)."""
    original = options.compile_options

    def patched(*args, **kw):
        kw.update(extra)
        return original(*args, **kw)

    return original, patched


def _errors_vs_fp64(mod, model, variants: dict) -> tuple[float, dict[str, float]]:
    """Eager's and each variant's max abs error against one fp64 reference
    (computed once: an fp64 conv of the seed's size takes seconds)."""
    import fuseforge

    snapshot = copy.deepcopy(model.state_dict())
    inputs = problem_inputs(mod, 0, "cuda")
    ref64 = fp64_run(mod, model, 0, "cuda")[0]
    with torch.no_grad():
        eager = max(max_err(o, r) for o, r in zip(flatten_tensors(model(*inputs)), ref64))
    out = {}
    for name, (extra, forced) in variants.items():
        original, patched = _with_compile_args(extra)
        saved = os.environ.get("FUSEFORGE_CONV_PRECISION")
        options.compile_options = patched
        if forced:
            os.environ["FUSEFORGE_CONV_PRECISION"] = forced
        try:
            fast = fuseforge.optimize(copy.deepcopy(model))
            fast.load_state_dict(snapshot)
            with torch.no_grad():
                out[name] = max(max_err(o, r) for o, r in zip(flatten_tensors(fast(*inputs)), ref64))
        finally:
            options.compile_options = original
            if saved is None:
                os.environ.pop("FUSEFORGE_CONV_PRECISION", None)
            else:
                os.environ["FUSEFORGE_CONV_PRECISION"] = saved
    return eager, out


def section_b(paths: list[Path], budget: float) -> list[dict]:
    print("\nB. root cause: fuseforge error vs fp64 over eager's (max abs, whole output; <= 2 passes)")
    print(
        "problem | mode | eager err | new | old (TF32 everywhere, conv_engine on) | off (conv_engine off, TF32 as eager)"
    )
    no_layout = [p for p in core.default_pipeline() if p != "conv_engine"]
    variants = {"new": ({}, None), "old": ({}, "tf32"), "off": ({"passes": no_layout}, "tf32")}
    rows = []
    for path in paths:
        for mode in ("eval", "train"):
            text, _ = captured_convs(path, mode)
            if not _pointwise_fed_2d(text):
                continue
            if out_of_time(budget):
                print(f"(stopped: over the {budget:.0f} s budget)")
                return rows
            mod, model = build_model(str(path), mode, "cuda")
            eager, errs = _errors_vs_fp64(mod, model, variants)
            row = {
                "problem": problem_name(path),
                "mode": mode,
                "eager_err": eager,
                **{name: e / max(eager, 1e-30) for name, e in errs.items()},
            }
            rows.append(row)
            print(f"{row['problem']} | {mode} | {eager:.1e} | {row['new']:.2f} | {row['old']:.2f} | {row['off']:.2f}")
            torch.cuda.empty_cache()
    return rows


def _conv_graph(c: dict, math: str) -> tuple[str, list[int]]:
    """A graph of the conv on channels-last operands with a relu writing NCHW, and its output shape."""
    out = conv_probe.output_shape(c)

    def cl(shape):
        fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
        return torch.empty(shape, device="meta").contiguous(memory_format=fmt).stride()

    def t(shape, strides=None):
        s = f"{c['dtype']}[{','.join(map(str, shape))}]"
        return s + ("{" + ",".join(map(str, strides)) + "}" if strides else "")

    attrs = conv_probe.conv_attrs(c, math, engine="implicit_gemm")
    x, w = t(c["input"][1], cl(c["input"][1])), t(c["weight"][1], cl(c["weight"][1]))
    # A 1xTF32 conv reads operands rounded to tf32 where they were written (round_conv_operands), as in a plan.
    rounded = math == "tf32" and c["dtype"] == "f32"
    operands = "%xr, %wr" if rounded else "%x, %w"
    text = (
        f"graph @probe(%x: {x}, %w: {w} param) {{\n"
        + (f"  %xr = round_tf32(%x) : {x}\n  %wr = round_tf32(%w) : {w}\n" if rounded else "")
        + f"  %0 = convolution({operands}) {{{attrs}}} : {t(out, cl(out))}\n  %1 = relu(%0) : {t(out)}\n"
        f"  return %1\n}}\n"
    )
    return text, out


def _time_kernel(c: dict, math: str, arch: int) -> dict | str:
    """Our implicit-GEMM kernel for conv `c` (fused relu, channels-last
    operands, `math`) against cuDNN's channels-last conv + relu: kernel_ms,
    cudnn_ms, err_over_eager (the kernel's error against fp64 over eager's)
    and the kernel's name; or why there is none."""
    graph, out_shape = _conv_graph(c, math)
    plan = options.compile_ir(graph, arch=arch, passes=["cse"], gemm="off").plan
    ks = [(i, k) for i, k in enumerate(plan.kernels) if k.kind == "conv"]
    if not ks:
        return "not covered by a conv kernel"
    i, k = ks[0]
    kern = core.load_kernels(plan.kernels, arch)[i]
    if isinstance(kern, str):
        return f"kernel did not compile: {kern[:200]}"
    with torch.no_grad():
        x, w = conv_probe.operands(c, DEV)
        fmt = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
        xl, wl = x.contiguous(memory_format=fmt), w.contiguous(memory_format=fmt)
        # A 1xTF32 kernel reads operands rounded to tf32 (the plan rounds them in the copies that make them
        # channels-last); cuDNN rounds them itself, so both see the same values.
        xk, wk = (conv_probe.round_tf32(xl), conv_probe.round_tf32(wl)) if math == "tf32" else (xl, wl)
        y = torch.empty(out_shape, dtype=x.dtype, device=DEV)
        stream = torch.cuda.current_stream().cuda_stream
        run = lambda: kern.launch(0, [y.data_ptr(), xk.data_ptr(), wk.data_ptr()], [], stream)  # noqa: E731
        run()
        ref = torch.relu(conv_call(c, x[:1].double(), w.double()))
        with conv_fp32_precision(math):
            eager = max_err(torch.relu(conv_call(c, x, w))[:1], ref)
            t = time_cuda({"kernel": run, "cudnn": lambda: torch.relu(conv_call(c, xl, wl))}, trials=10)
        err = max_err(y[:1], ref)
    return {
        "kernel_ms": t["kernel"],
        "cudnn_ms": t["cudnn"],
        "err_over_eager": err / max(eager, 1e-30),
        "kernel": k.name,
    }


def _kernel_convs(paths: list[Path], budget: float):
    """(path, conv, decided math) per distinct forward 2-D or 3-D conv without
    groups of a floating dtype, until the budget runs out (then says so)."""
    seen = set()
    for path in paths:
        text, convs = captured_convs(path, "eval")
        choice = decided(text)
        for c in convs:
            if (
                c["transposed"]
                or c["groups"] != 1
                or len(c["input"][1]) not in (4, 5)
                or c["signature"] in seen
                or c["dtype"] not in ("f32", "f16", "bf16")
            ):
                continue
            seen.add(c["signature"])
            if out_of_time(budget):
                print(f"(stopped: over the {budget:.0f} s budget)")
                return
            math = choice.get(c["signature"], ("ieee", False))[0]
            yield path, c, "ieee" if math == "-" else math


def section_c(paths: list[Path], budget: float) -> list[dict]:
    print("\nC. generated conv kernels (fused relu) vs cuDNN channels-last conv + relu, decided math")
    print(
        "problem | conv | x | w | math | kernel ms | cudnn ms | kernel TFLOP/s | cudnn TFLOP/s | kernel err/eager | tile"
    )
    rows = []
    arch = core.device_arch(0)
    for path, c, math in _kernel_convs(paths, budget):
        t = _time_kernel(c, math, arch)
        if isinstance(t, str):
            print(f"{problem_name(path)} | {kind(c)} | {t}")
            continue
        row = {
            "problem": problem_name(path),
            "conv": kind(c),
            "math": math,
            **t,
            "kernel_tflops": c["flops"] / t["kernel_ms"] / 1e9,
            "cudnn_tflops": c["flops"] / t["cudnn_ms"] / 1e9,
        }
        rows.append(row)
        print(
            f"{row['problem']} | {row['conv']} | {'x'.join(map(str, c['input'][1]))} | "
            f"{'x'.join(map(str, c['weight'][1]))} | {math} | {t['kernel_ms']:.3f} | {t['cudnn_ms']:.3f} | "
            f"{row['kernel_tflops']:.0f} | {row['cudnn_tflops']:.0f} | {row['err_over_eager']:.2f} | {t['kernel']}"
        )
    return rows


ENGINES = ("cudnn_contiguous", "cudnn_channels_last", "kernel", "direct")


def section_d(paths: list[Path], budget: float) -> list[dict]:
    print("\nD. the cost model against the GPU: modelled ms / timed ms per conv and engine (decided math)")
    print("problem | conv | x | w | math | " + " | ".join(f"{e} model/timed" for e in ENGINES))
    rows = []
    arch = core.device_arch(0)
    for path, c, math in _kernel_convs(paths, budget):
        model = core.convolutions(conv_probe.probe_graph(c, math)[0])[0]["model_ms"]
        timed: dict[str, float | None] = dict.fromkeys(ENGINES)
        layouts = conv_probe.measure_layout(c, DEV, math)
        timed["cudnn_contiguous"], timed["cudnn_channels_last"] = layouts["contiguous_ms"], layouts["channels_last_ms"]
        if model["kernel"] is not None:
            t = _time_kernel(c, math, arch)
            timed["kernel"] = None if isinstance(t, str) else t["kernel_ms"]
        direct = conv_probe.direct_kernel(c, arch) if model["direct"] is not None else None
        if direct is not None:
            timed["direct"] = conv_probe.measure_direct(c, DEV, *direct)["direct_ms"]
        ratio = {e: model[e] / timed[e] for e in ENGINES if model[e] is not None and timed[e]}
        rows.append(
            {"problem": problem_name(path), "conv": kind(c), "math": math, "model_ms": model, "timed_ms": timed}
        )
        cells = [f"{model[e]:.3f}/{timed[e]:.3f} ({ratio[e]:.2f}x)" if e in ratio else "-" for e in ENGINES]
        print(
            f"{problem_name(path)} | {kind(c)} | {'x'.join(map(str, c['input'][1]))} | "
            f"{'x'.join(map(str, c['weight'][1]))} | {math} | " + " | ".join(cells)
        )
    # Errors as factors, max(model/timed, timed/model): a tiny conv modelled at a
    # thousandth of its time reads 1000x, not 0.00x.
    print("engine | convs | median model/timed | median error | worst error")
    for e in ENGINES:
        ratios = sorted(r["model_ms"][e] / r["timed_ms"][e] for r in rows if r["model_ms"][e] and r["timed_ms"][e])
        if ratios:
            errors = sorted(max(v, 1 / v) for v in ratios)
            print(
                f"{e} | {len(ratios)} | {ratios[len(ratios) // 2]:.2f}x | {errors[len(errors) // 2]:.2f}x | "
                f"{errors[-1]:.3g}x"
            )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", nargs="*", default=["benchmarks/problems"])
    ap.add_argument("--sections", default="ABCD")
    ap.add_argument("--budget", type=float, default=210.0, help="seconds after which no new work starts")
    ap.add_argument("--json", help="write every figure here")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("conv_probe: needs a CUDA GPU", file=sys.stderr)
        return 2
    paths = [p for p in find_problems(args.problems) if "conv" in Path(p).read_text().lower()]
    print(
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
        f"eager conv math: {eager_conv_precision()}; {len(paths)} problems with convs"
    )
    report = {}
    sections = {"A": section_a, "B": section_b, "C": section_c, "D": section_d}
    for s in args.sections:
        report[s] = sections[s]([Path(p) for p in paths], args.budget)
    print(f"\n{time.perf_counter() - START:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
