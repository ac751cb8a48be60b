"""Comparing outputs without copying them whole: the error and closeness
figures `fuseforge run` judges by, computed in float64 over chunks of at most
CHUNK_ELEMENTS elements, so checking a 6 GB output needs a few hundred MB
more, not several times its size."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import torch

#: Elements compared at a time (16 Mi: 128 MiB per float64 temporary).
CHUNK_ELEMENTS = 1 << 24

#: Outputs within this of eager (rtol and atol) are correct.
TOLERANCE = 1e-4
_TOLERANCE_TEXT = f"{TOLERANCE:.0e}".replace("e-0", "e-")  # 1e-4


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


def mismatch(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], what: str) -> str | None:
    """How `a` differs from eager's `b` in count, shape or dtype (`what`
    names the tensors: "output", "updated buffer"); None where it does not."""
    if len(a) != len(b):
        return f"{len(a)} {what}s where eager has {len(b)}"
    for i, (x, y) in enumerate(zip(a, b)):
        if x.shape != y.shape or x.dtype != y.dtype:
            return f"{what} {i} is {x.dtype} {tuple(x.shape)} where eager's is {y.dtype} {tuple(y.shape)}"
    return None


@dataclass(frozen=True)
class Verdict:
    """One accuracy rule for every problem, over the outputs and updated
    buffers together: correct when within TOLERANCE (atol and rtol) of eager
    (rule "eager"), or when the error against fp64 is at most twice eager's
    error against fp64 (rule "fp64"); `rule` is None when neither held.
    `err` is the max abs error vs eager, `err64` and `eager64` fuseforge's and
    eager's vs fp64 (None without an fp64 reference); `reason` says why it is
    incorrect whatever the errors (a count, shape or dtype unlike eager's)."""

    correct: bool
    rule: str | None
    err: float
    err64: float | None = None
    eager64: float | None = None
    reason: str | None = None

    def describe(self) -> str:
        """The verdict in words, naming the rule that held (or why none did)."""
        if self.rule == "eager":
            return f"correct (within {_TOLERANCE_TEXT} of eager)"
        if self.rule == "fp64":
            return f"correct (error vs fp64 {self.err64:.1e} ≤ 2× eager's {self.eager64:.1e})"
        if self.reason is not None:
            return f"incorrect: {self.reason}"
        if self.err64 is None:
            return f"incorrect: max err vs eager {self.err:.1e}, not within {_TOLERANCE_TEXT}"
        return (
            f"incorrect: max err vs eager {self.err:.1e} and vs fp64 {self.err64:.1e} > 2× eager's {self.eager64:.1e}"
        )


def assess(
    out: Sequence[torch.Tensor],
    ref: Sequence[torch.Tensor],
    ref64: Sequence[torch.Tensor] | None,
    out_buf: Sequence[torch.Tensor],
    ref_buf: Sequence[torch.Tensor],
    ref64_buf: Sequence[torch.Tensor] = (),
) -> Verdict:
    """The Verdict on fuseforge's outputs and updated buffers (`out`,
    `out_buf`) against eager's (`ref`, `ref_buf`) and the fp64 reference's
    (`ref64`, `ref64_buf`, the buffers as the fp64 run left them). Without
    `ref64` (None) only the eager rule is tried and the fp64 figures are None."""
    reason = mismatch(out, ref, "output") or mismatch(out_buf, ref_buf, "updated buffer")
    ours, eager = [*out, *out_buf], [*ref, *ref_buf]
    err = max_err(ours, eager) if reason is None else float("inf")
    within = reason is None and close(ours, eager)
    if ref64 is None:
        return Verdict(within, "eager" if within else None, err, reason=reason)
    if len(ref64) != len(ref) or len(ref64_buf) != len(ref_buf):
        raise ValueError(
            f"the fp64 reference has {len(ref64)} outputs and {len(ref64_buf)} buffers; "
            f"eager {len(ref)} and {len(ref_buf)}"
        )
    exact = [*ref64, *ref64_buf]
    err64, eager64 = max_err(ours, exact), max_err(eager, exact)
    if within:
        return Verdict(True, "eager", err, err64, eager64)
    if reason is None and err64 <= 2 * eager64:
        return Verdict(True, "fp64", err, err64, eager64)
    return Verdict(False, None, err, err64, eager64, reason)


def combine(verdicts: Sequence[Verdict]) -> Verdict:
    """The verdict over several seeds: the first incorrect one if any; else
    "fp64" where that rule decided any seed (the fp64 figures the maxima over
    those seeds, so that err64 ≤ 2 × eager64 still holds), else "eager"."""
    if not verdicts:
        raise ValueError("no verdicts to combine")
    wrong = [v for v in verdicts if not v.correct]
    if wrong:
        return wrong[0]
    err = max(v.err for v in verdicts)
    by_fp64 = [v for v in verdicts if v.rule == "fp64"]
    if not by_fp64:
        return Verdict(True, "eager", err)
    return Verdict(True, "fp64", err, max(v.err64 or 0.0 for v in by_fp64), max(v.eager64 or 0.0 for v in by_fp64))


@overload
def judge(
    out: Sequence[torch.Tensor],
    ref: Sequence[torch.Tensor],
    ref64: Sequence[torch.Tensor],
    out_buf: Sequence[torch.Tensor],
    ref_buf: Sequence[torch.Tensor],
    ref64_buf: Sequence[torch.Tensor] = (),
) -> tuple[bool, float, float, float]: ...
@overload
def judge(
    out: Sequence[torch.Tensor],
    ref: Sequence[torch.Tensor],
    ref64: None,
    out_buf: Sequence[torch.Tensor],
    ref_buf: Sequence[torch.Tensor],
    ref64_buf: Sequence[torch.Tensor] = (),
) -> tuple[bool, float, None, None]: ...
def judge(
    out: Sequence[torch.Tensor],
    ref: Sequence[torch.Tensor],
    ref64: Sequence[torch.Tensor] | None,
    out_buf: Sequence[torch.Tensor],
    ref_buf: Sequence[torch.Tensor],
    ref64_buf: Sequence[torch.Tensor] = (),
) -> tuple[bool, float, float | None, float | None]:
    """(correct, error vs eager, error vs fp64, eager's error vs fp64): the
    figures of assess's Verdict (see there for the rule)."""
    v = assess(out, ref, ref64, out_buf, ref_buf, ref64_buf)
    return v.correct, v.err, v.err64, v.eager64
