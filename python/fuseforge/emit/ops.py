"""Library steps of a plan as Python source text, for `fuseforge emit`: the
core's torch expression of each step (`Step.torch_expr`, the very text the
executor compiles, opaque nodes included). Operands arrive as source text
(variable names or literals)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from fuseforge._native import core


class EmitError(ValueError):
    """A plan that `fuseforge emit` cannot write out; the message says what."""


def literal(v: Any) -> str:
    """A Python number (or bool/None) as source text; inf and nan included."""
    if isinstance(v, float) and (math.isinf(v) or math.isnan(v)):
        return f"float({str(v)!r})"
    if v is None or isinstance(v, (bool, int, float)):
        return repr(v)
    raise EmitError(f"cannot write literal {v!r}")


def step_expr(step: core.Step, a: Sequence[str]) -> str:
    """Source of an expression computing one call step over operand texts `a`.
    Raises EmitError for a step the core cannot write as torch (an opaque
    node's arguments outside capture's grammar)."""
    try:
        return step.torch_expr(list(a))
    except ValueError as e:
        raise EmitError(f"fuseforge emit: no Python form for step `{step.node_text}`: {e}") from None
