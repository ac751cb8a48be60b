"""Reduction problems on a GPU: eager, torch.compile and fuseforge timed side
by side, and the memory traffic of each against the copy bandwidth measured
on the same GPU.

    python tools/reduction_bench.py [--problems softmax_rows,rmsnorm_manual] [--no-inductor] [--budget 170]

What it prints:
  1. The copy bandwidth: a 1 GiB device-to-device copy, (read + write bytes) / time.
  2. Per problem (cold L2, interleaved rounds, median): eager / torch.compile /
     fuseforge ms, fuseforge's speedups, and the problem's minimum traffic (its
     inputs, outputs and buffer updates, each once: fuseforge.harness.roofline)
     over fuseforge's time as GB/s and as a fraction of the copy bandwidth. For
     the memory-bound problems that fraction is the target (>= 80%);
     the conv problems spend most of their time in the convolution.
  3. Per generated reduction kernel (torch.profiler, 5 warm calls, mean): its
     time, the bytes it reads and writes (its tensors, broadcast dims once) and
     that as a fraction of the copy bandwidth, with the kernel's strategy.
Problems are run in order until --budget seconds have passed (torch.compile's
compile time dominates); the ones left are listed. Everything is also written
as JSON to --json if given.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

import fuseforge
from fuseforge.harness.problem import build_model, problem_inputs
from fuseforge.harness.roofline import plan_bytes
from fuseforge.runtime.timing import time_cuda

ROOT = Path(__file__).resolve().parents[1]
DEV = ROOT / "benchmarks" / "problems" / "dev"

#: Memory-bound reduction problems (the copy-bandwidth target applies), then
#: the conv problems whose reductions follow a convolution.
MEMORY_BOUND = [
    "softmax_rows",
    "logsumexp_mean",
    "rmsnorm_manual",
    "max_and_argmax",
    "layernorm_residual_dropout_eval",
    "classifier_head",
    "linear_gelu_layernorm",
]
CONV = [
    "conv2d_groupnorm_silu",
    "conv2d_instancenorm_scale",
    "conv2d_channel_max_sigmoid",
    "convtranspose2d_softmax_channels",
    "conv2d_batchnorm_train_scale",
    "convtranspose3d_layernorm_pool",
    "conv3d_softmax_maxpool",
    "conv2d_avgpool_sigmoid_sum",
]
_ITEMSIZE = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8, "i64": 8, "i32": 4, "bool": 1}


def copy_bandwidth() -> float:
    """Bytes/s of a 1 GiB device-to-device copy (read + write), median of 10."""
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(12):
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        if i >= 2:
            times.append(start.elapsed_time(end) / 1e3)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * n / statistics.median(times)


def kernel_bytes(plan, k) -> int:
    """What a kernel reads and writes: each of its tensors once, broadcast (stride-0) dims once."""
    total = 0
    for b in [i.buffer for i in k.inputs] + list(k.outputs):
        buf = plan.buffers[b]
        total += math.prod(int(n) for n, s in zip(buf.shape, buf.strides) if s != 0) * _ITEMSIZE.get(buf.dtype, 4)
    return total


def kernel_times(fast, xs) -> dict[str, float]:
    """Mean device ms per kernel name over 5 warm calls (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    fast(*xs)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            fast(*xs)
        torch.cuda.synchronize()
    out: dict[str, float] = {}
    for e in prof.key_averages():
        if e.key.startswith("ff_"):
            device_us = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
            out[e.key] = device_us / 1e3 / 5
    return out


def bench_problem(name: str, bandwidth: float, inductor: bool) -> dict:
    path = DEV / f"{name}.py"
    mod, model = build_model(str(path), None, "cuda")
    xs = problem_inputs(mod, 0, "cuda")
    eager = copy.deepcopy(model)
    t0 = time.perf_counter()
    fast = fuseforge.optimize(model)
    with torch.no_grad():
        fast(*xs)
    compile_s = {"fuseforge": time.perf_counter() - t0}
    fns = {"eager": lambda: eager(*xs)}
    if inductor:
        t0 = time.perf_counter()
        compiled = torch.compile(copy.deepcopy(eager))
        with torch.no_grad():
            compiled(*xs)
        compile_s["torch.compile"] = time.perf_counter() - t0
        fns["torch.compile"] = lambda: compiled(*xs)
    fns["fuseforge"] = lambda: fast(*xs)
    with torch.no_grad():
        ms = time_cuda(fns, trials=15, max_seconds=20)
        plan = fast.specializations()[0].compiled.plan
        per_kernel = kernel_times(fast, xs)
    nbytes = plan_bytes(plan)
    row = {
        "problem": name,
        "ms": ms,
        "compile_s": compile_s,
        "bytes": nbytes,
        "gbps": nbytes / ms["fuseforge"] / 1e6,
        "copy_fraction": nbytes / (ms["fuseforge"] / 1e3) / bandwidth,
        "kernels": [],
    }
    for k in plan.kernels:
        if k.kind != "reduction":
            continue
        t = per_kernel.get(k.name)
        b = kernel_bytes(plan, k)
        row["kernels"].append(
            {
                "name": k.name,
                "ms": t,
                "bytes": b,
                "copy_fraction": b / (t / 1e3) / bandwidth if t else None,
                "strategy": k.source.split("\n")[0].split("; ")[-1],
            }
        )
    return row


def _fmt_ms(v):
    return f"{v:8.3f}" if v is not None else "       —"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", default="", help="comma-separated problem names (default: all reduction problems)")
    ap.add_argument("--no-inductor", action="store_true", help="skip torch.compile (its compile time dominates)")
    ap.add_argument("--budget", type=float, default=170.0, help="seconds after which no further problem starts")
    ap.add_argument("--json", default="", help="also write the results here")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("reduction_bench: needs a CUDA GPU", file=sys.stderr)
        return 2
    names = [n for n in args.problems.split(",") if n] or MEMORY_BOUND + CONV
    unknown = [n for n in names if not (DEV / f"{n}.py").exists()]
    if unknown:
        print(f"reduction_bench: no such dev problem: {', '.join(unknown)}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    device = torch.cuda.get_device_name()
    bandwidth = copy_bandwidth()
    print(f"{device}: 1 GiB device-to-device copy: {bandwidth / 1e9:.0f} GB/s (read + write)\n")
    header = (
        f"{'problem':34} {'eager':>8} {'compile':>8} {'ff':>8}  {'vs eager':>8} {'vs comp':>8}  "
        f"{'MB':>8} {'GB/s':>6} {'copy%':>6}"
    )
    print(header + "\n" + "-" * len(header))
    rows, skipped = [], []
    for name in names:
        if time.perf_counter() - start > args.budget:
            skipped.append(name)
            continue
        try:
            row = bench_problem(name, bandwidth, not args.no_inductor)
            torch.cuda.empty_cache()  # the problem's models and inputs are gone with its frame
        except Exception as e:  # one failing problem must not hide the others
            print(f"{name:34} failed: {type(e).__name__}: {str(e).splitlines()[0][:100]}")
            rows.append({"problem": name, "error": f"{type(e).__name__}: {e}"})
            continue
        rows.append(row)
        ms = row["ms"]
        comp = ms.get("torch.compile")
        print(
            f"{name:34} {_fmt_ms(ms['eager'])} {_fmt_ms(comp)} {_fmt_ms(ms['fuseforge'])}  "
            f"{ms['eager'] / ms['fuseforge']:7.2f}x {(comp / ms['fuseforge']) if comp else float('nan'):7.2f}x  "
            f"{row['bytes'] / 1e6:8.1f} {row['gbps']:6.0f} {row['copy_fraction']:6.0%}"
            + ("" if name in MEMORY_BOUND else "  (conv)")
        )
        for k in row["kernels"]:
            frac = f"{k['copy_fraction']:.0%}" if k["copy_fraction"] is not None else "—"
            print(
                f"    {k['name'][:46]:46} {_fmt_ms(k['ms'])} ms {k['bytes'] / 1e6:8.1f} MB  {frac:>5} of copy  "
                f"{k['strategy']}"
            )
    if skipped:
        print(f"\nbudget of {args.budget:.0f} s spent; not run: {', '.join(skipped)} (run them with --problems)")
    print(
        f"\ncopy% = minimum bytes (inputs, outputs, buffer updates once) / fuseforge time / copy bandwidth; "
        f"per kernel: its tensors' bytes / its time. Total {time.perf_counter() - start:.0f} s."
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"device": device, "copy_bandwidth": bandwidth, "problems": rows, "skipped": skipped}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
