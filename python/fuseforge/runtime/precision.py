"""Precision policies: which ones exist, the context that makes library
f32 matmuls follow one, and cuDNN's conv precision: what eager's convs may
use under the user's flags, and a context that sets it for a call
(conv_fp32_precision, library_calls' helper re-exported)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from fuseforge._native import core
from fuseforge.runtime.library_calls import conv_fp32_precision  # noqa: F401 (re-exported)

#: The precision policies (the core's list): "fp32" (the default) keeps fp32
#: accuracy: f32 matmuls run as 3xTF32 GEMM kernels. "tf32" (opt-in, faster,
#: about 1e-3 relative error) computes f32 matmuls in plain TF32: cuBLAS's
#: TF32 kernels, or TF32 GEMM kernels with FUSEFORGE_GEMM=1. f32 convolutions
#: use TF32 under "tf32"; under "fp32" only where eager's own conv of that
#: shape does under the user's flags (probed on the GPU: runtime/conv_probe.py),
#: so their error stays within twice eager's.
PRECISIONS: tuple[str, ...] = tuple(core.PRECISIONS)


def check_precision(precision: str) -> None:
    """Raises ValueError naming the available policies if `precision` has none."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not available; available: {', '.join(PRECISIONS)}")


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


def eager_conv_precision() -> str:
    """ "tf32" or "ieee": the math cuDNN convolutions may use under the current
    flags: torch.backends.cudnn.conv.fp32_precision, where "none" inherits
    cuDNN's, then the generic setting (the legacy allow_tf32 switch sets them)."""
    # conv and fp32_precision are properties of the module classes torch swaps
    # in at import (PropModule), which its stubs do not show.
    value = torch.backends.cudnn.conv.fp32_precision  # type: ignore[attr-defined]  # read per call: the rest only when it inherits
    if value == "none":
        value = torch.backends.cudnn.fp32_precision
    if value == "none":
        value = torch.backends.fp32_precision  # type: ignore[attr-defined]
    return "ieee" if value == "none" else value
