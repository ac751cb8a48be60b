"""Compile options: the precision policy, which matmuls become GEMM kernels,
autotuning and the target GPU. The environment variables that change them are
read here and nowhere else:

- FUSEFORGE_GEMM: auto (default: f32 matmuls at the fp32 precision), all (or
  1: f32, f16 and bf16) or off (or 0);
- FUSEFORGE_AUTOTUNE=1: each GEMM kernel's other tiles are compiled too and
  timed at its first run (the choice is cached on disk);
- FUSEFORGE_REDUCTIONS=0: reductions, norms and softmax stay library calls
  (to compare with the generated reduction kernels).
"""
from __future__ import annotations

import os
from typing import Any

from fuseforge._native import core
from fuseforge.runtime.precision import check_precision


def compile_options(precision: str = "fp32", arch: int = 0, *, gemm: str | None = None,
                    trace: bool = False, passes: list[str] | None = None) -> Any:
    """A core.CompileOptions. `gemm` overrides FUSEFORGE_GEMM; `arch` is the
    target GPU's compute capability (0: unknown); `trace` records the IR after
    each pass. Raises ValueError naming a bad precision or policy."""
    check_precision(precision)
    policy = gemm if gemm is not None else os.environ.get("FUSEFORGE_GEMM", "auto")
    try:
        return core.CompileOptions(precision=precision, gemm=policy,
                                   autotune=os.environ.get("FUSEFORGE_AUTOTUNE") == "1", arch=arch,
                                   passes=passes or [], trace=trace,
                                   reductions=os.environ.get("FUSEFORGE_REDUCTIONS") != "0")
    except ValueError as e:
        where = "" if gemm is not None else "FUSEFORGE_GEMM is " + repr(policy) + ": "
        raise ValueError(f"fuseforge: {where}{e}") from None


def compile_ir(text: str, precision: str = "fp32", arch: int = 0, *, gemm: str | None = None,
               trace: bool = False, passes: list[str] | None = None) -> Any:
    """Compiles IR text (passes, fusion, CUDA, the plan): a core.Compiled with
    ir_before, ir_after, pass_trace and plan."""
    return core.compile(text, compile_options(precision, arch, gemm=gemm, trace=trace, passes=passes))
