"""Opaque nodes at run time: their argument expressions compiled into calls.

The ``args`` (and, for keyword-only arguments, ``kwargs``) attribute of an
``opaque`` node is a Python expression: literals, lists, ``None``/``True``/
``False``, ``$k`` for the k-th tensor operand, ``inf``/``nan``, ``torch.<name>``
for dtypes, layouts and memory formats, and ``torch.device('cuda', 0)`` for
devices (as seen at capture). ``decode_opaque_args`` turns it back into call arguments and
``run_opaque`` calls the op.
"""
from __future__ import annotations

import ast
import math
import re
from typing import Any, Callable, Sequence

import torch

_TENSOR_REF = re.compile(r"\$(\d+)")
_TORCH_ENUMS = (torch.dtype, torch.layout, torch.memory_format)


class _ConstArg:
    """A compiled argument expression that does not depend on the operands."""
    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __call__(self, operands: Sequence[Any]) -> Any:
        return self.value


def _compile_expr(text: str, device: Any) -> Callable[[Sequence[Any]], Any]:
    """Compiles an opaque argument expression once into a function of the
    operands (the parse and the operand-free parts are not redone per call)."""
    expr = _TENSOR_REF.sub(lambda m: f"__ff_t{m.group(1)}", text)
    tree = ast.parse(expr, mode="eval")

    const = _ConstArg

    def seq(parts: list, build: Callable[[list], Any]) -> Callable[[Sequence[Any]], Any]:
        fns = [comp(e) for e in parts]
        if all(isinstance(f, _ConstArg) for f in fns):
            return const(build([f.value for f in fns]))
        return lambda ops: build([f(ops) for f in fns])

    def comp(n: ast.AST) -> Callable[[Sequence[Any]], Any]:
        if isinstance(n, ast.Constant):
            return const(n.value)
        if isinstance(n, ast.List):
            return seq(n.elts, list)
        if isinstance(n, ast.Tuple):
            return seq(n.elts, tuple)
        if isinstance(n, ast.Dict):
            keys = [comp(k) for k in n.keys if k is not None]
            if len(keys) != len(n.keys) or not all(isinstance(k, _ConstArg) for k in keys):
                raise ValueError(f"unexpected dict keys in opaque arguments {text!r}")
            names = [k.value for k in keys]
            return seq(n.values, lambda vals: dict(zip(names, vals)))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            inner = comp(n.operand)
            sign = -1 if isinstance(n.op, ast.USub) else 1
            if isinstance(inner, _ConstArg):
                return const(-inner.value if sign < 0 else +inner.value)
            return lambda ops: -inner(ops) if sign < 0 else +inner(ops)
        if isinstance(n, ast.Name):
            if n.id.startswith("__ff_t"):
                index = int(n.id[6:])
                return lambda ops: ops[index]
            if n.id == "inf":
                return const(math.inf)
            if n.id == "nan":
                return const(math.nan)
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "device"
                and isinstance(n.func.value, ast.Name) and n.func.value.id == "torch" and not n.keywords):
            if device is not None:
                return const(device)
            return seq(n.args, lambda a: torch.device(*a))
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "torch":
            v = getattr(torch, n.attr, None)
            if isinstance(v, _TORCH_ENUMS):
                return const(v)
        raise ValueError(f"unexpected {ast.dump(n)} in opaque arguments {text!r}")

    return comp(tree.body)


def compile_opaque_args(args: str, kwargs: str | None,
                        device: Any = None) -> Callable[[Sequence[Any]], tuple[list[Any], dict[str, Any]]]:
    """The call arguments of an opaque node as a function of its tensor
    operands: `args`/`kwargs` are its attributes. Devices are written as the
    capture saw them (``torch.device('cuda', 0)``); a `device` given here
    replaces them all (to run a graph captured on one device on another)."""
    if device is not None:
        device = torch.device(device)
    pos = _compile_expr(args, device)
    kw = _compile_expr(kwargs, device) if kwargs else (lambda ops: {})
    return lambda operands: (list(pos(operands)), dict(kw(operands)))


def decode_opaque_args(args: str, kwargs: str | None, operands: Sequence[torch.Tensor],
                       device: Any = None) -> tuple[list[Any], dict[str, Any]]:
    """`compile_opaque_args` applied once to `operands`."""
    return compile_opaque_args(args, kwargs, device)(operands)


def resolve_target(target: str) -> torch._ops.OpOverload:
    """'aten.max.dim' -> torch.ops.aten.max.dim."""
    parts = target.split(".")
    if len(parts) != 3:
        raise ValueError(f"bad opaque target {target!r}")
    ns, name, overload = parts
    return getattr(getattr(getattr(torch.ops, ns), name), overload)


def compile_opaque_call(target: str, args: str, kwargs: str | None,
                        device: Any = None) -> Callable[[Sequence[Any]], tuple[torch.Tensor, ...]]:
    """An opaque node's ATen call as a function of its operands, returning its results as a tuple."""
    op, decode = resolve_target(target), compile_opaque_args(args, kwargs, device)

    def call(operands: Sequence[Any]) -> tuple[torch.Tensor, ...]:
        pos, kw = decode(operands)
        out = op(*pos, **kw)
        return tuple(out) if isinstance(out, (list, tuple)) else (out,)
    return call


def run_opaque(target: str, args: str, kwargs: str | None, operands: Sequence[torch.Tensor],
               device: Any = None) -> tuple[torch.Tensor, ...]:
    """Runs an opaque node's ATen op once; returns its results as a tuple."""
    return compile_opaque_call(target, args, kwargs, device)(operands)
