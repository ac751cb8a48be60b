"""The values the lowering passes around: IR values, literals, lifted
constants, and the exception a handler raises to get an opaque node."""

from __future__ import annotations

from typing import Any

import torch

from fuseforge.capture.irtext import IRType
from fuseforge.dtypes import IR_NAME


class Value:
    """An IR value (graph input or node result)."""

    __slots__ = ("name", "type")

    def __init__(self, name: str, type: IRType):
        self.name = name
        self.type = type


class Lit:
    """A scalar literal operand; `const` is the 0-d lifted constant it came from."""

    __slots__ = ("value", "const")

    def __init__(self, value: Any, const: Const | None = None):
        self.value = value
        self.const = const


class Const:
    """A lifted constant tensor, added as a `const` graph input only when needed."""

    __slots__ = ("key", "tensor", "value")

    def __init__(self, key: str, tensor: torch.Tensor):
        self.key = key
        self.tensor = tensor
        self.value: Value | None = None

    @property
    def is_scalar(self) -> bool:
        return self.tensor.dim() == 0 and self.tensor.dtype in IR_NAME and self.tensor.device.type != "meta"


class Unsupported(Exception):
    """Raised by a handler to fall back to an opaque node."""
