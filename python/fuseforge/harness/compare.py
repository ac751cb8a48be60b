"""Comparing outputs without copying them whole: the error and closeness
figures `fuseforge run` judges by, computed in float64 over chunks of at most
CHUNK_ELEMENTS elements, so checking a 6 GB output needs a few hundred MB
more, not several times its size."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import torch

#: Elements compared at a time (16 Mi: 128 MiB per float64 temporary).
CHUNK_ELEMENTS = 1 << 24

#: Outputs within this of eager (rtol and atol) are correct.
TOLERANCE = 1e-4


def flatten_tensors(x: Any) -> list[torch.Tensor]:
    """The tensors among `x`'s pytree leaves, in order."""
    from torch.utils import _pytree as pytree

    return [t for t in pytree.tree_leaves(x) if isinstance(t, torch.Tensor)]


def chunks(x: torch.Tensor, y: torch.Tensor, limit: int | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Matching views of two tensors of one shape, each of at most `limit`
    elements (default CHUNK_ELEMENTS), split along the leading dimensions
    (views: nothing is copied here)."""
    limit = CHUNK_ELEMENTS if limit is None else limit
    if x.dim() == 0 or x.numel() <= limit:
        yield x, y
        return
    if x.shape[0] == 1:
        yield from chunks(x[0], y[0], limit)
        return
    per_index = x.numel() // x.shape[0]
    step = max(1, limit // per_index)
    for p, q in zip(x.split(step), y.split(step)):
        yield from chunks(p, q, limit)


def max_err(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
    """Largest |a - b| over all pairs, in float64 (NaN where both are NaN
    counts 0; inf where only one is NaN, or where shapes differ)."""
    err = 0.0
    for x, y in zip(a, b):
        if x.shape != y.shape:
            return float("inf")
        for p, q in chunks(x, y):
            if not p.numel():
                continue
            p, q = p.double(), q.double()
            d = (p - q).abs_()
            both = p.isnan() & q.isnan()
            if bool((d.isnan() & ~both).any()):  # NaN on one side only (max() would skip it)
                return float("inf")
            d.masked_fill_(both, 0.0)
            err = max(err, float(d.max()))
    return err


def close(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], tol: float = TOLERANCE) -> bool:
    """Same count, shapes and dtypes, and every pair allclose at `tol` (NaN equal to NaN)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        for p, q in chunks(x, y):
            if not torch.allclose(p.double(), q.double(), rtol=tol, atol=tol, equal_nan=True):
                return False
    return True


@overload
def judge(
    out: Sequence[torch.Tensor],
    ref: Sequence[torch.Tensor],
    ref64: Sequence[torch.Tensor],
    out_buf: Sequence[torch.Tensor],
    ref_buf: Sequence[torch.Tensor],
) -> tuple[bool, float, float, float]: ...
@overload
def judge(
    out: Sequence[torch.Tensor],
    ref: Sequence[torch.Tensor],
    ref64: None,
    out_buf: Sequence[torch.Tensor],
    ref_buf: Sequence[torch.Tensor],
) -> tuple[bool, float, None, None]: ...
def judge(
    out: Sequence[torch.Tensor],
    ref: Sequence[torch.Tensor],
    ref64: Sequence[torch.Tensor] | None,
    out_buf: Sequence[torch.Tensor],
    ref_buf: Sequence[torch.Tensor],
) -> tuple[bool, float, float | None, float | None]:
    """(correct, error vs eager, error vs fp64, eager's error vs fp64). Correct:
    outputs and updated buffers within 1e-4 of eager; where eager itself is far
    from fp64 (fp16 models, TF32 convs, long fp32 sums) the output bar is being
    no worse than twice eager's error against fp64. Without `ref64` (None)
    only the first test applies and the fp64 figures are None."""
    err = max_err(out, ref)
    buffers_ok = close(out_buf, ref_buf)
    if ref64 is None:
        return buffers_ok and close(out, ref), err, None, None
    err64, eager64 = max_err(out, ref64), max_err(ref, ref64)
    ok = buffers_ok and (
        close(out, ref) or (all(o.dtype == r.dtype for o, r in zip(out, ref)) and err64 <= 2 * eager64 + 1e-6)
    )
    return ok, err, err64, eager64
