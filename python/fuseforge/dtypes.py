"""The IR's dtypes in Python: the one mapping between IR dtype names and torch
dtypes, and the at::k* names emitted C++ uses, all read from the core's dtype
table (csrc/ir/dtype.h), where the names are defined."""

from __future__ import annotations

import torch

from fuseforge._native import core

_TABLE = core.dtype_table()

#: IR dtype name -> torch dtype ('f32' -> torch.float32)
TORCH: dict[str, torch.dtype] = {d.name: getattr(torch, d.torch) for d in _TABLE}
#: torch dtype -> IR dtype name
IR_NAME: dict[torch.dtype, str] = {t: name for name, t in TORCH.items()}
#: IR dtype name -> the c10 scalar type constant ('f32' -> 'at::kFloat')
ATEN: dict[str, str] = {d.name: d.aten for d in _TABLE}
#: IR dtype name -> bytes per element ('f32' -> 4)
SIZE: dict[str, int] = {d.name: d.size for d in _TABLE}


def torch_text(name: str) -> str:
    """Source text of an IR dtype's torch dtype: 'f32' -> 'torch.float32'."""
    return str(TORCH[name])
