"""IR text as the C++ printer writes it (docs/IR.md): types, literals,
attributes and value names, so that capture's ``print(parse(text)) == text``.
Dtype names and float literals come from the core (its dtype table and printer)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from fuseforge._native import core
from fuseforge.capture.graph import CaptureError
from fuseforge.dtypes import IR_NAME

NAME_RE = re.compile(r"[^A-Za-z0-9_.]")


def format_literal(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return core.format_float(float(v))


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def format_attr(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return core.format_float(float(v))
    if isinstance(v, str):
        return _quote(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(str(int(x)) for x in v) + "]"
    raise CaptureError(f"cannot print attribute value {v!r}")


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    out = [0] * len(shape)
    acc = 1
    for i in range(len(shape) - 1, -1, -1):
        out[i] = acc
        acc *= max(shape[i], 1)
    return tuple(out)


def _static_int(x: Any, what: str) -> int:
    try:
        return int(x)
    except Exception as e:  # a SymInt without a hint
        raise CaptureError(f"{what}: dynamic size {x!r} (fuseforge graphs have static shapes)") from e


@dataclass(frozen=True)
class IRType:
    dtype: torch.dtype
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    @staticmethod
    def of(t: Any, what: str) -> IRType:
        if isinstance(t, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            raise CaptureError(
                f"{what}: a data-dependent scalar ({t}); fuseforge graphs cannot use "
                "values read from tensors (.item(), .tolist(), Python control flow on data)"
            )
        if not isinstance(t, torch.Tensor):
            raise CaptureError(f"{what}: expected a tensor value, got {type(t).__name__}")
        if t.dtype not in IR_NAME:
            raise CaptureError(
                f"{what}: dtype {t.dtype} is not supported by the IR (supported: {', '.join(IR_NAME.values())})"
            )
        shape = tuple(_static_int(s, what) for s in t.shape)
        try:
            strides = tuple(_static_int(s, what) for s in t.stride())
        except RuntimeError:  # tensors without strides (sparse, nested)
            raise CaptureError(f"{what}: tensor without strides ({t.layout})") from None
        return IRType(t.dtype, shape, strides)

    def with_dtype(self, dtype: torch.dtype) -> IRType:
        return IRType(dtype, self.shape, self.strides)

    def text(self) -> str:
        s = f"{IR_NAME[self.dtype]}[{','.join(str(d) for d in self.shape)}]"
        if self.strides != contiguous_strides(self.shape):
            s += "{" + ",".join(str(d) for d in self.strides) + "}"
        return s

    def meta(self) -> torch.Tensor:
        return torch.empty_strided(self.shape, self.strides, dtype=self.dtype, device="meta")
