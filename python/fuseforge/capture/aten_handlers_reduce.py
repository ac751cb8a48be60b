"""Handlers of ATen reductions with several results, lowered to one IR
reduction per result over the same input: the reduction scheduler computes
them in one pass (var and mean share Welford's accumulator; values and
indices of max/min share one), and each stays an IR op the rest of the
compiler understands rather than an opaque call."""
from __future__ import annotations

from typing import TYPE_CHECKING

from fuseforge.capture.aten_handlers import _norm_dim, _norm_dims, _register, _var_attrs

if TYPE_CHECKING:
    from fuseforge.capture.lowering import _Lowerer


def _var_mean(L: _Lowerer, node, a):
    """torch.var_mean(x, dims, correction, keepdim) -> (var, mean)."""
    x = L.value(a["self"])
    attrs = _var_attrs(a, len(x.type.shape))
    var_t, mean_t = L.types(node)
    var = L.emit1("var", [x], var_t, attrs)
    mean = L.emit1("mean", [x], mean_t, {"dims": attrs["dims"], "keepdim": attrs["keepdim"]})
    return [var, mean]


def _extreme_with_index(value_op: str, index_op: str):
    """torch.max(x, dim) / torch.min(x, dim) -> (values, indices): amax and argmax."""
    def h(L: _Lowerer, node, a):
        x = L.value(a["self"])
        dim = _norm_dim(int(a["dim"]), len(x.type.shape))
        keepdim = bool(a.get("keepdim") or False)
        values_t, indices_t = L.types(node)
        values = L.emit1(value_op, [x], values_t, {"dims": [dim], "keepdim": keepdim})
        indices = L.emit1(index_op, [x], indices_t, {"dim": dim, "keepdim": keepdim})
        return [values, indices]
    return h


def _logsumexp(L: _Lowerer, node, a):
    x = L.value(a["self"])
    dims = _norm_dims(a.get("dim"), len(x.type.shape))
    return L.emit1("logsumexp", [x], L.rtype(node), {"dims": dims, "keepdim": bool(a.get("keepdim") or False)})


_register(["var_mean.correction"], _var_mean)
_register(["max.dim"], _extreme_with_index("amax", "argmax"))
_register(["min.dim"], _extreme_with_index("amin", "argmin"))
_register(["logsumexp.default"], _logsumexp)
