"""Precision policies: which ones exist, and the context that makes library
f32 matmuls follow one."""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch

#: Precision policies with a code path; `check_precision` rejects the others.
#: "fp32" (the default) keeps fp32 accuracy: f32 matmuls run as 3xTF32 GEMM
#: kernels. "tf32" (opt-in, faster, about 1e-3 relative error) computes f32
#: matmuls in plain TF32: cuBLAS's TF32 kernels, or TF32 GEMM kernels with
#: FUSEFORGE_GEMM=1. Convolutions use TF32 under both, as eager does.
PRECISIONS = ("fp32", "tf32")


def check_precision(precision: str) -> None:
    """Raises ValueError naming the available policies if `precision` has none."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not available yet; available: {', '.join(PRECISIONS)}")


def precision_context(precision: str) -> contextlib.AbstractContextManager:
    """Within it, library f32 matmuls follow `precision` (TF32 allowed under
    "tf32"; nothing changes under "fp32"). Used around fused forwards and, by
    `fuseforge run`/`bench`, around the eager and inductor baselines, so that
    all three compute the same work."""
    check_precision(precision)
    return _tf32_matmuls() if precision == "tf32" else contextlib.nullcontext()


@contextlib.contextmanager
def _tf32_matmuls() -> Iterator[None]:
    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved)
