"""Handlers of ATen reductions with several results, lowered to one IR
reduction per result over the same input: the reduction scheduler computes
them in one pass (var and mean share Welford's accumulator; values and
indices of max/min share one), and each stays an IR op the rest of the
compiler understands rather than an opaque call."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.fx as fx

from fuseforge.capture.registry import Handler, Lowering, norm_dim, norm_dims, opmath, register, var_attrs
from fuseforge.capture.values import Lit, Unsupported, Value


def _var_mean(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    """torch.var_mean(x, dims, correction, keepdim) -> (var, mean)."""
    x = L.value(a["self"])
    attrs = var_attrs(a, len(x.type.shape))
    var_t, mean_t = L.types(node)
    var = L.emit1("var", [x], var_t, attrs)
    mean = L.emit1("mean", [x], mean_t, {"dims": attrs["dims"], "keepdim": attrs["keepdim"]})
    return [var, mean]


def _extreme_with_index(value_op: str, index_op: str) -> Handler:
    """torch.max(x, dim) / torch.min(x, dim) -> (values, indices): amax and argmax."""

    def h(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
        x = L.value(a["self"])
        dim = norm_dim(int(a["dim"]), len(x.type.shape))
        keepdim = bool(a.get("keepdim") or False)
        values_t, indices_t = L.types(node)
        values = L.emit1(value_op, [x], values_t, {"dims": [dim], "keepdim": keepdim})
        indices = L.emit1(index_op, [x], indices_t, {"dim": dim, "keepdim": keepdim})
        return [values, indices]

    return h


def _logsumexp(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    x = L.value(a["self"])
    dims = norm_dims(a.get("dim"), len(x.type.shape))
    return L.emit1("logsumexp", [x], L.rtype(node), {"dims": dims, "keepdim": bool(a.get("keepdim") or False)})


def _vector_norm(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    """torch.linalg.vector_norm (torch.norm, F.normalize, cosine similarity)
    as pointwise ops and one reduction, in f32 for f16 and bf16 inputs as
    ATen computes it: ord 2 sqrt(sum(x * x)), 1 sum(|x|), inf amax(|x|),
    -inf amin(|x|), 0 the count of nonzeros, p sum(|x| ** p) ** (1 / p)."""
    t = L.rtype(node)
    x = L.value(a["self"])
    if not x.type.dtype.is_floating_point or a.get("dtype") is not None:
        raise Unsupported("vector norm of a non-floating tensor or with a dtype")
    x = opmath(L, x)
    ft = x.type
    order = float(2 if a.get("ord") is None else a["ord"])
    attrs = {"dims": norm_dims(a.get("dim"), len(ft.shape)), "keepdim": bool(a.get("keepdim") or False)}
    reduced = t.with_dtype(ft.dtype)

    def over(op: str, v: Value) -> Value:
        return L.emit1(op, [v], reduced, attrs)

    if order == 2:
        out = L.pointwise("sqrt", [over("sum", L.pointwise("mul", [x, x], ft))], reduced)
    elif order == 0:
        nonzero = L.pointwise("ne", [x, Lit(0.0)], ft.with_dtype(torch.bool))
        out = over("sum", L.pointwise("cast", [nonzero], ft))
    else:
        magnitude = L.pointwise("abs", [x], ft)
        if order == math.inf:
            out = over("amax", magnitude)
        elif order == -math.inf:
            out = over("amin", magnitude)
        elif order == 1:
            out = over("sum", magnitude)
        else:
            powered = over("sum", L.pointwise("pow", [magnitude, Lit(order)], ft))
            out = L.pointwise("pow", [powered, Lit(1.0 / order)], reduced)
    return out if reduced.dtype == t.dtype else L.emit1("cast", [out], t)


register(["var_mean.correction"], _var_mean)
register(["linalg_vector_norm.default"], _vector_norm)
register(["max.dim"], _extreme_with_index("amax", "argmax"))
register(["min.dim"], _extreme_with_index("amin", "argmin"))
register(["logsumexp.default"], _logsumexp)
