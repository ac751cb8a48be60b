"""A simple roofline estimate of a compiled plan, for `fuseforge bench`.

The estimate, stated so that nobody mistakes it for more:

- bytes: every tensor the plan must read or write at least once — its graph
  inputs (user inputs, parameters, buffers, constants), its outputs and its
  buffer updates. Intermediates are not counted: a perfect fusion would keep
  them on chip, so this is a lower bound on DRAM traffic.
- FLOPs: 2·M·N·K for each mm/addmm/bmm step and 2·(output elements)·(input
  channels per group)·(kernel elements) for each convolution step (for a
  transposed convolution the input plays the output's role). Pointwise and
  reduction work is not counted (it is far below the memory bound).
- ideal time = max(bytes / peak DRAM bandwidth, matmul FLOPs / peak fp32
  rate + convolution FLOPs / peak TF32 tensor-core rate): fp32 matmuls run
  without TF32 by default, while cuDNN convolutions use TF32 as eager does
  (torch.backends.cudnn.allow_tf32 defaults to True);
  fraction = ideal time / measured time (1.0 = at the roofline).

Peaks are the vendor's datasheet figures for the devices listed in PEAKS;
for any other device the fraction is not reported (None).
"""
from __future__ import annotations

import math
from typing import Any

#: device-name substring -> (DRAM bytes/s, fp32 FLOP/s without tensor cores,
#: dense TF32 tensor-core FLOP/s): datasheet figures.
PEAKS: dict[str, tuple[float, float, float]] = {
    "H100 80GB HBM3": (3.35e12, 67e12, 495e12),   # H100 SXM5
    "H100 PCIe": (2.0e12, 51e12, 378e12),
    "H200": (4.8e12, 67e12, 495e12),
}

_ITEMSIZE = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8, "i64": 8, "i32": 4, "bool": 1}


def _numel(shape: Any) -> int:
    return math.prod(int(d) for d in shape)


def _bytes(plan: dict, name: str) -> int:
    dtype, shape, _ = plan["values"][name]
    return _numel(shape) * _ITEMSIZE.get(dtype, 4)


def plan_bytes(plan: dict) -> int:
    """Bytes of the plan's inputs, outputs and buffer updates (each counted once)."""
    names = dict.fromkeys([*plan["inputs"], *plan["outputs"], *(v for _, v in plan["mutations"])])
    return sum(_bytes(plan, n) for n in names)


def _step_flops(plan: dict, step: dict) -> int:
    op = step.get("op")
    operands = [v for kind, v in step.get("operands", []) if kind == "value"]
    shape = lambda n: plan["values"][n][1]  # noqa: E731
    out = step["result_types"][0][1] if step.get("result_types") else None
    if op in ("mm", "bmm") and len(operands) >= 2:
        k = shape(operands[0])[-1]
        return 2 * _numel(out) * int(k)
    if op == "addmm" and len(operands) >= 3:
        return 2 * _numel(out) * int(shape(operands[1])[-1])
    if op == "convolution" and len(operands) >= 2:
        weight = shape(operands[1])  # [C_out, C_in/groups, *k] (transposed: [C_in, C_out/groups, *k])
        kernel = _numel(weight[2:])
        if step["attrs"].get("transposed"):
            return 2 * _numel(shape(operands[0])) * int(weight[1]) * kernel
        return 2 * _numel(out) * int(weight[1]) * kernel
    return 0


def plan_flops(plan: dict, ops: tuple[str, ...]) -> int:
    """FLOPs of the plan's nodes whose op is in `ops`: library steps, and the
    nodes of generated kernels (a GEMM kernel holds its matmul)."""
    nodes = []
    for s in plan["steps"]:
        nodes += plan["kernels"][s["kernel"]].get("nodes", []) if s["kind"] == "kernel" else [s]
    return sum(_step_flops(plan, n) for n in nodes if n.get("op") in ops)


def peaks(device_name: str) -> tuple[float, float, float] | None:
    """(DRAM bytes/s, fp32 FLOP/s, TF32 FLOP/s) of a known device, else None."""
    for key, value in PEAKS.items():
        if key in device_name:
            return value
    return None


def roofline(plan: dict, device_name: str, ms: float) -> dict[str, Any]:
    """bytes, flops, ideal_ms and roofline_fraction (None for an unknown device)."""
    nbytes = plan_bytes(plan)
    mm_flops, conv_flops = plan_flops(plan, ("mm", "addmm", "bmm")), plan_flops(plan, ("convolution",))
    result: dict[str, Any] = {"bytes": nbytes, "flops": mm_flops + conv_flops, "ideal_ms": None,
                              "roofline_fraction": None}
    p = peaks(device_name)
    if p is not None and ms > 0:
        ideal_s = max(nbytes / p[0], mm_flops / p[1] + conv_flops / p[2])
        result["ideal_ms"] = ideal_s * 1e3
        result["roofline_fraction"] = ideal_s * 1e3 / ms
    return result
