"""Compile options: the precision policy, which matmuls become GEMM kernels,
autotuning and the target GPU. The environment variables that change them are
read here and nowhere else:

- FUSEFORGE_GEMM: auto (default: f32 matmuls at the fp32 precision), all (or
  1: f32, f16 and bf16) or off (or 0);
- FUSEFORGE_AUTOTUNE=1: each GEMM kernel's other tiles are compiled too and
  timed at its first run (the choice is cached on disk);
- FUSEFORGE_REDUCTIONS=0: reductions, norms, softmax, pooling and scans stay library calls
  (to compare with the generated reduction kernels);
- FUSEFORGE_CONV_KERNELS: auto (default, or 1: convs as generated direct or
  implicit-GEMM kernels where the cost model, with cuDNN's times measured on
  the GPU, prefers them to cuDNN), direct (only direct kernels: 2-D f32
  convs), always (every conv an implicit-GEMM kernel covers) or off (or 0);
- FUSEFORGE_CONV_PRECISION: probe (default), ieee or tf32: every f32 conv's
  math forced instead of probed (diagnostics; runtime/conv_probe.py);
- FUSEFORGE_FAST_CALL=0: every call takes the Python path, none the native
  one (runtime/fast_call.py; to compare, or to rule it out).

With a CUDA device, `compile_ir` first probes what eager's convolutions do on
it (conv_probe.decide) and hands the answers to the compiler.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from fuseforge._native import core
from fuseforge.runtime import conv_probe
from fuseforge.runtime.precision import check_precision


def fast_call_enabled() -> bool:
    return os.environ.get("FUSEFORGE_FAST_CALL") != "0"


def autotune_enabled() -> bool:
    return os.environ.get("FUSEFORGE_AUTOTUNE") == "1"


def conv_policy() -> str:
    return os.environ.get("FUSEFORGE_CONV_KERNELS", "auto")


def compile_options(
    precision: str = "fp32",
    arch: int = 0,
    *,
    gemm: str | None = None,
    trace: bool = False,
    passes: list[str] | None = None,
    convs: dict[str, dict[str, bool]] | None = None,
) -> Any:
    """A core.CompileOptions. `gemm` overrides FUSEFORGE_GEMM; `arch` is the
    target GPU's compute capability (0: unknown); `trace` records the IR after
    each pass; `convs` is conv_probe.decide's answer. Raises ValueError naming
    a bad precision or policy."""
    check_precision(precision)
    policy = gemm if gemm is not None else os.environ.get("FUSEFORGE_GEMM", "auto")
    conv = conv_policy()
    try:
        return core.CompileOptions(
            precision=precision,
            gemm=policy,
            autotune=autotune_enabled(),
            arch=arch,
            passes=passes or [],
            trace=trace,
            reductions=os.environ.get("FUSEFORGE_REDUCTIONS") != "0",
            conv=conv,
            **(convs or {}),
        )
    except ValueError as e:
        where = "" if gemm is not None else f"FUSEFORGE_GEMM is {policy!r}, FUSEFORGE_CONV_KERNELS is {conv!r}: "
        raise ValueError(f"fuseforge: {where}{e}") from None


def probe_convs(text: str, precision: str, device: torch.device) -> dict[str, dict[str, bool]]:
    """What eager's convolutions in `text` do on `device` (conv_probe.decide)."""
    forced = os.environ.get("FUSEFORGE_CONV_PRECISION", "probe")
    if forced not in ("probe", "ieee", "tf32"):
        raise ValueError(f"fuseforge: FUSEFORGE_CONV_PRECISION is {forced!r}; expected probe, ieee or tf32")
    implicit = conv_policy() in ("auto", "1", "always")
    return conv_probe.decide(
        text,
        precision,
        device,
        forced=forced,
        tune_layout=autotune_enabled(),
        time_cudnn=implicit,
        time_direct=conv_policy() in ("auto", "1"),
    )


def compile_ir(
    text: str,
    precision: str = "fp32",
    arch: int = 0,
    *,
    gemm: str | None = None,
    trace: bool = False,
    passes: list[str] | None = None,
    device: torch.device | None = None,
) -> Any:
    """Compiles IR text (passes, fusion, CUDA, the plan): a core.Compiled with
    ir_before, ir_after, pass_trace and plan. With a CUDA `device`, each f32
    conv's math and layout follow what eager's conv does there (probed)."""
    convs = probe_convs(text, precision, device) if device is not None and device.type == "cuda" else None
    return core.compile(text, compile_options(precision, arch, gemm=gemm, trace=trace, passes=passes, convs=convs))
