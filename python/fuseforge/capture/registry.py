"""The ATen handler table and what a handler receives.

A handler is ``(lowering, node, bound args) -> env entry``: it lowers one ATen
node to IR nodes through the `Lowering` it is given, or raises
values.Unsupported to get an opaque node instead. Handler modules
(aten_handlers*.py) import this module (and values, irtext) and `register`
their handlers; lowering.py imports them to fill the table and looks handlers
up here, so the handlers never depend on the lowerer itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
import torch.fx as fx

from fuseforge.capture.graph import CaptureError
from fuseforge.capture.irtext import IRType
from fuseforge.capture.values import Const, Unsupported, Value


class Lowering(Protocol):
    """The lowering state a handler may use (lowering.Lowerer implements it)."""

    #: Each lowered fx node's entry: a Value, a Lit, a Const, a list of them or None.
    env: dict[fx.Node, Any]
    #: (start, end, step, dtype) -> the one constant for equal aranges.
    aranges: dict[tuple, Const]

    def emit(
        self, op: str, operands: Sequence[Any], types: Sequence[IRType], attrs: dict[str, Any] | None = None
    ) -> list[Value]: ...

    def emit1(self, op: str, operands: Sequence[Any], t: IRType, attrs: dict[str, Any] | None = None) -> Value: ...

    def operand(self, x: Any) -> Any: ...

    def value(self, x: Any) -> Value: ...

    def types(self, node: fx.Node) -> list[IRType]: ...

    def rtype(self, node: fx.Node) -> IRType: ...

    def infer(self, fn: Callable, *args: Any) -> IRType: ...

    def pointwise(self, op: str, operands: list[Any], t: IRType, attrs: dict | None = None) -> Value: ...


Handler = Callable[[Lowering, fx.Node, dict[str, Any]], Any]

_HANDLERS: dict[Any, Handler] = {}


def aten_op(name: str, overload: str) -> Any:
    """torch.ops.aten.<name>.<overload>, or None where this PyTorch lacks it."""
    packet = getattr(torch.ops.aten, name, None)
    return getattr(packet, overload, None) if packet is not None else None


def register_op(op: Any, fn: Handler) -> None:
    """`fn` lowers `op` (an OpOverload). A second handler for one op is an
    error: which one ran would depend on the order the modules were imported."""
    if op in _HANDLERS:
        raise RuntimeError(f"two capture handlers for {op}")
    _HANDLERS[op] = fn


def register(specs: Sequence[str], fn: Handler) -> None:
    """`fn` lowers each ATen overload named "name.overload" in `specs` (those
    this PyTorch has)."""
    for spec in specs:
        op = aten_op(*spec.split("."))
        if op is not None:
            register_op(op, fn)


def lookup(op: Any) -> Handler | None:
    """The handler registered for `op`, or None (an opaque node)."""
    return _HANDLERS.get(op)


# ---- argument helpers the handler modules share


def norm_dim(d: int, rank: int) -> int:
    r = max(rank, 1)
    if not -r <= d < r:
        raise CaptureError(f"dim {d} out of range for rank {rank}")
    return d + r if d < 0 else d


def norm_dims(dims: Any, rank: int) -> list[int]:
    if dims is None:
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    if len(dims) == 0:
        return list(range(rank))
    return sorted({norm_dim(int(d), rank) for d in dims})


def var_attrs(a: dict, rank: int) -> dict:
    """var's attributes from var/var_mean's arguments (correction 1 unless given)."""
    corr = a.get("correction")
    corr = 1 if corr is None else corr
    if float(corr) != int(corr):
        raise Unsupported("fractional correction")
    return {"dims": norm_dims(a.get("dim"), rank), "keepdim": bool(a.get("keepdim") or False), "correction": int(corr)}


def opmath(L: Lowering, x: Value) -> Value:
    """x as the dtype ATen's kernels compute it in: f32 for f16 and bf16."""
    if x.type.dtype in (torch.float16, torch.bfloat16):
        return L.emit1("cast", [x], x.type.with_dtype(torch.float32))
    return x
