"""IR ops that run as library calls: each maps to a PyTorch function.

The executor calls `make_call(step)` once per plan step; the returned closure
takes the operand values (tensors, or Python numbers for literals and scalar
inputs) and returns a tensor or a tuple of tensors.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

DTYPES = {
    "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64,
    "i64": torch.int64, "i32": torch.int32, "bool": torch.bool,
}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}

Call = Callable[[list[Any]], Any]


def _dims(attrs: dict, x: torch.Tensor) -> list[int]:
    dims = attrs.get("dims") or []
    return list(dims) if dims else list(range(x.dim()))


def _reduction(fn: Callable, with_dtype: bool = False) -> Callable[[dict, torch.dtype], Call]:
    def make(attrs: dict, out_dtype: torch.dtype) -> Call:
        keep = bool(attrs.get("keepdim", False))
        if with_dtype:
            return lambda a: fn(a[0], dim=_dims(attrs, a[0]), keepdim=keep, dtype=out_dtype)
        return lambda a: fn(a[0], dim=_dims(attrs, a[0]), keepdim=keep)
    return make


def _prod(attrs: dict, out_dtype: torch.dtype) -> Call:
    keep = bool(attrs.get("keepdim", False))

    def run(a: list) -> torch.Tensor:
        x = a[0]
        for d in sorted(_dims(attrs, x), reverse=True):
            x = torch.prod(x, dim=d, keepdim=keep, dtype=out_dtype)
        return x
    return run


def _argextreme(fn: Callable) -> Callable[[dict, torch.dtype], Call]:
    def make(attrs: dict, out_dtype: torch.dtype) -> Call:
        return lambda a: fn(a[0], dim=attrs.get("dim"), keepdim=bool(attrs.get("keepdim", False)))
    return make


def _opaque(attrs: dict, out_dtype: torch.dtype, device: torch.device) -> Call:
    from fuseforge.capture import compile_opaque_call
    return compile_opaque_call(attrs["target"], attrs.get("args", "[]"), attrs.get("kwargs"), device)


def _convolution(attrs: dict, out_dtype: torch.dtype) -> Call:
    stride, padding, dilation = attrs["stride"], attrs["padding"], attrs["dilation"]
    transposed = bool(attrs.get("transposed", False))
    output_padding = attrs.get("output_padding", [0] * len(stride))
    groups = attrs.get("groups", 1)
    return lambda a: torch.ops.aten.convolution.default(
        a[0], a[1], a[2] if len(a) > 2 else None, stride, padding, dilation, transposed, output_padding, groups)


def _slice(attrs: dict, out_dtype: torch.dtype) -> Call:
    dim, start, end, step = attrs["dim"], attrs.get("start", 0), attrs.get("end"), attrs.get("step", 1)
    return lambda a: torch.ops.aten.slice.Tensor(a[0], dim, start, end, step)


# op name -> factory(attrs, result dtype) -> call(operands)
_LIBRARY: dict[str, Callable[[dict, torch.dtype], Call]] = {
    "mm": lambda at, dt: lambda a: torch.mm(a[0], a[1]),
    "bmm": lambda at, dt: lambda a: torch.bmm(a[0], a[1]),
    "addmm": lambda at, dt: (lambda a: torch.addmm(a[0], a[1], a[2])) if at.get("beta", 1) == 1 and at.get("alpha", 1) == 1
    else lambda a: torch.addmm(a[0], a[1], a[2], beta=at.get("beta", 1), alpha=at.get("alpha", 1)),
    "sum": _reduction(torch.sum, with_dtype=True),
    "mean": _reduction(torch.mean, with_dtype=True),
    "amax": _reduction(torch.amax),
    "amin": _reduction(torch.amin),
    "any": _reduction(torch.any),
    "prod": _prod,
    "var": lambda at, dt: lambda a: torch.var(a[0], dim=_dims(at, a[0]), correction=at.get("correction", 1),
                                              keepdim=bool(at.get("keepdim", False))),
    "argmax": _argextreme(torch.argmax),
    "argmin": _argextreme(torch.argmin),
    "softmax": lambda at, dt: lambda a: torch.softmax(a[0], at["dim"], dtype=dt if dt != a[0].dtype else None),
    "log_softmax": lambda at, dt: lambda a: torch.log_softmax(a[0], at["dim"], dtype=dt if dt != a[0].dtype else None),
    "layer_norm": lambda at, dt: lambda a: F.layer_norm(a[0], a[0].shape[a[0].dim() - at["ndims"]:], a[1], a[2], at["eps"]),
    "cumsum": lambda at, dt: lambda a: torch.cumsum(a[0], at["dim"], dtype=dt),
    "convolution": _convolution,
    "permute": lambda at, dt: lambda a: a[0].permute(at["dims"]),
    "unsqueeze": lambda at, dt: lambda a: a[0].unsqueeze(at["dim"]),
    "squeeze": lambda at, dt: lambda a: a[0].squeeze(tuple(at["dims"])) if "dims" in at else a[0].squeeze(),
    "slice": _slice,
    "select": lambda at, dt: lambda a: a[0].select(at["dim"], at["index"]),
    "cat": lambda at, dt: lambda a: torch.cat(a, at["dim"]),
}


def make_call(op: str, attrs: dict, result_types: list, device: torch.device) -> Call:
    """The library call for one plan step (view/expand read their shape from the result type)."""
    dtype = DTYPES[result_types[0][0]]
    shape = list(result_types[0][1])
    if op == "view":
        return lambda a: a[0].reshape(shape)  # a view when strides allow, else a copy (as the IR's view rule)
    if op == "expand":
        return lambda a: a[0].expand(shape)
    if op == "opaque":
        return _opaque(attrs, dtype, device)
    if op in _LIBRARY:
        return _LIBRARY[op](attrs, dtype)
    return _pointwise_call(op, attrs, dtype, shape, device)


# Pointwise ops normally run inside generated kernels; these eager forms serve
# the CPU path and any group that must fall back.
_POINTWISE: dict[str, Callable] = {
    "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "log": torch.log, "log1p": torch.log1p,
    "expm1": torch.expm1, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
    "relu": torch.relu, "silu": F.silu, "sin": torch.sin, "cos": torch.cos, "reciprocal": torch.reciprocal,
    "erf": torch.erf, "floor": torch.floor, "ceil": torch.ceil, "trunc": torch.trunc, "round": torch.round,
    "sign": torch.sign, "logical_not": torch.logical_not, "isnan": torch.isnan,
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "pow": torch.pow,
    "maximum": torch.maximum, "minimum": torch.minimum, "eq": torch.eq, "ne": torch.ne, "lt": torch.lt,
    "le": torch.le, "gt": torch.gt, "ge": torch.ge, "logical_and": torch.logical_and,
    "logical_or": torch.logical_or, "remainder": torch.remainder, "fmod": torch.fmod, "where": torch.where,
}


def _pointwise_call(op: str, attrs: dict, dtype: torch.dtype, shape: list, device: torch.device) -> Call:
    if op == "gelu":
        return lambda a: F.gelu(a[0], approximate=attrs.get("approximate", "none"))
    if op in ("cast", "copy"):
        return lambda a: a[0].to(dtype, copy=True)
    if op == "full":
        return lambda a: torch.full(shape, a[0], dtype=dtype, device=device)
    if op not in _POINTWISE:
        raise NotImplementedError(f"no library call for IR op '{op}'")
    fn = _POINTWISE[op]

    def run(a: list) -> torch.Tensor:
        # maximum/minimum/where/pow need tensors; wrap Python numbers as 0-d.
        if op in ("maximum", "minimum"):
            a = [x if isinstance(x, torch.Tensor) else torch.tensor(x) for x in a]
        return fn(*a).to(dtype)
    return run
