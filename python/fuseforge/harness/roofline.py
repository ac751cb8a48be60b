"""A simple roofline estimate of a compiled plan, for `fuseforge run` and `bench`.

The estimate, stated so that nobody mistakes it for more:

- bytes: every tensor the plan must read or write at least once — its graph
  inputs (user inputs, parameters, buffers, constants), its outputs and its
  buffer updates. Intermediates are not counted: a perfect fusion would keep
  them on chip, so this is a lower bound on DRAM traffic.
- FLOPs: 2·M·N·K for each mm/addmm/bmm and 2·(output elements)·(input
  channels per group)·(kernel elements) for each convolution (for a
  transposed convolution the input plays the output's role), whether a
  library step or inside a GEMM kernel. Pointwise and reduction work is not
  counted (it is far below the memory bound).
- each op's FLOPs count against the dense tensor-core peak of the precision
  it is computed at (`op_peak`): f16/bf16 at the FP16 peak; f32 matmuls
  under the fp32 policy at a third of the TF32 peak (3xTF32: three TF32 MMAs
  per product, the fp32-accurate ceiling), under `tf32` at the TF32 peak;
  f32 convolutions by the math their fp32_precision attribute allows: "tf32"
  at the TF32 peak, "ieee" at a third of it in a generated conv kernel
  (3xTF32) and at the non-tensor fp32 peak in cuDNN (its IEEE convs run
  SIMT kernels).
- compute time = sum of FLOPs / peak; ideal time = max(bytes / peak DRAM
  bandwidth, compute time); roofline fraction = ideal time / measured time
  (1.0 = at the roofline); tensor_peak_fraction = compute time / measured
  time; tflops = FLOPs / measured time.

Peaks are the vendor's datasheet figures for the devices listed in PEAKS;
for any other device the fractions are not reported (None).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from fuseforge.dtypes import SIZE


class Peaks(NamedTuple):
    """Datasheet figures of one device: DRAM bytes/s and dense FLOP/s."""

    dram: float
    fp32: float  # without tensor cores
    tf32: float  # tensor cores
    fp16: float  # tensor cores, f16 and bf16


#: device-name substring -> its datasheet peaks.
PEAKS: dict[str, Peaks] = {
    "H100 80GB HBM3": Peaks(3.35e12, 67e12, 495e12, 989e12),  # H100 SXM5
    "H100 PCIe": Peaks(2.0e12, 51e12, 378e12, 756e12),
    "H200": Peaks(4.8e12, 67e12, 495e12, 989e12),
}


def _numel(shape: Any) -> int:
    return math.prod(int(d) for d in shape)


def _bytes(plan: Any, b: int) -> int:
    buf = plan.buffers[b]
    return _numel(buf.shape) * SIZE[buf.dtype]


def plan_bytes(plan: Any) -> int:
    """Bytes of the plan's inputs, outputs and buffer updates (each counted once)."""
    ids = dict.fromkeys([*plan.inputs, *plan.outputs, *(v for _, v in plan.mutations)])
    return sum(_bytes(plan, b) for b in ids)


def _step_flops(plan: Any, step: Any) -> int:
    op = step.op
    shape = lambda o: plan.buffers[o.buffer].shape  # noqa: E731
    operands = [o for o in step.operands if o.buffer >= 0]
    out = plan.buffers[step.results[0]].shape if len(step.results) else None
    if op in ("mm", "bmm") and len(operands) >= 2:
        return 2 * _numel(out) * int(shape(operands[0])[-1])
    if op == "addmm" and len(operands) >= 3:
        return 2 * _numel(out) * int(shape(operands[1])[-1])
    if op == "convolution" and len(operands) >= 2:
        weight = shape(operands[1])  # [C_out, C_in/groups, *k] (transposed: [C_in, C_out/groups, *k])
        kernel = _numel(weight[2:])
        if step.attrs.get("transposed"):
            return 2 * _numel(shape(operands[0])) * int(weight[1]) * kernel
        return 2 * _numel(out) * int(weight[1]) * kernel
    return 0


#: The ops whose FLOPs count.
_FLOP_OPS = ("mm", "addmm", "bmm", "convolution")


def plan_flops(plan: Any, ops: tuple[str, ...] = _FLOP_OPS) -> int:
    """FLOPs of the plan's nodes whose op is in `ops`."""
    return sum(_step_flops(plan, n) for n in _flop_nodes(plan) if n.op in ops)


def peaks(device_name: str) -> Peaks | None:
    """The datasheet peaks of a known device, else None."""
    for key, value in PEAKS.items():
        if key in device_name:
            return value
    return None


def op_peak(
    op: str, dtype: str, p: Peaks, precision: str = "fp32", fp32_precision: str | None = None, in_kernel: bool = False
) -> float:
    """FLOP/s ceiling of a matmul or convolution computed in `dtype` under the
    `precision` policy; a conv's `fp32_precision` attribute and whether a
    generated kernel (`in_kernel`) computes it (see the module docstring)."""
    if dtype in ("f16", "bf16"):
        return p.fp16
    if dtype != "f32":
        return p.fp32
    if op == "convolution":
        if fp32_precision == "tf32" or (fp32_precision is None and precision == "tf32"):
            return p.tf32
        return p.tf32 / 3 if in_kernel else p.fp32
    if precision == "tf32":
        return p.tf32
    return p.tf32 / 3


def _flop_nodes(plan: Any) -> list[Any]:
    """The run section's calls and the nodes of its kernels (a GEMM kernel
    holds its matmul); prepare's work is not part of a call."""
    return [n for n, _ in _nodes_where(plan)]


def _nodes_where(plan: Any) -> list[tuple[Any, bool]]:
    """(node, whether a generated kernel computes it) for the run section's
    calls and the nodes of its kernels."""
    nodes: list[tuple[Any, bool]] = []
    for s in plan.run:
        if s.kind == "launch":
            nodes += [(n, True) for n in plan.kernels[s.kernel].nodes]
        elif s.kind == "call":
            nodes.append((s, False))
    return nodes


def roofline(plan: Any, device_name: str, ms: float, precision: str = "fp32") -> dict[str, Any]:
    """bytes, flops, tflops (achieved), ideal_ms, roofline_fraction and
    tensor_peak_fraction (None for an unknown device, or without FLOPs)."""
    nbytes = plan_bytes(plan)
    counted = [(n, k, _step_flops(plan, n)) for n, k in _nodes_where(plan) if n.op in _FLOP_OPS]
    flops = sum(f for _, _, f in counted)
    result: dict[str, Any] = {
        "bytes": nbytes,
        "flops": flops,
        "tflops": flops / ms / 1e9 if flops and ms > 0 else None,
        "ideal_ms": None,
        "roofline_fraction": None,
        "tensor_peak_fraction": None,
    }
    p = peaks(device_name)
    if p is not None and ms > 0:
        compute_s = sum(
            f / op_peak(n.op, plan.buffers[n.results[0]].dtype, p, precision, n.attrs.get("fp32_precision"), in_kernel)
            for n, in_kernel, f in counted
        )
        ideal_s = max(nbytes / p.dram, compute_s)
        result["ideal_ms"] = ideal_s * 1e3
        result["roofline_fraction"] = ideal_s * 1e3 / ms
        result["tensor_peak_fraction"] = compute_s * 1e3 / ms if flops else None
    return result


#: What the TFLOP/s and roofline columns of `run` and `bench` mean.
ROOFLINE_LEGEND = (
    "TFLOP/s: matmul/conv FLOPs ÷ fuseforge time · roofline: ideal time (plan bytes at the DRAM peak, "
    "FLOPs at their precision's tensor-core peak) ÷ fuseforge time (fuseforge/harness/roofline.py)"
)


def roofline_cells(row: dict[str, Any]) -> tuple[str, str]:
    """A result row's TFLOP/s and roofline table cells ('—' where unknown)."""
    tflops, fraction = row.get("tflops"), row.get("roofline_fraction")
    return (f"{tflops:.1f}" if tflops is not None else "—", f"{fraction:.0%}" if fraction is not None else "—")
