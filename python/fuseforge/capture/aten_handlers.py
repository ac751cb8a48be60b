"""Per-ATen-op handlers (registry.py says what a handler is). A handler
raises Unsupported to get an opaque node instead."""

from __future__ import annotations

import operator
from typing import Any, cast

import torch
import torch.fx as fx

from fuseforge._native import core
from fuseforge.capture.irtext import IRType, contiguous_strides
from fuseforge.capture.registry import (
    Handler,
    Lowering,
    aten_op,
    norm_dim,
    norm_dims,
    opmath,
    register,
    register_op,
    var_attrs,
)
from fuseforge.capture.values import Const, Lit, Unsupported, Value


def _literal_for(value: Any, dtype: torch.dtype) -> Any:
    """A fill value as the literal kind that matches `dtype`."""
    if isinstance(value, torch.Tensor):
        value = value.item()
    if dtype.is_floating_point:
        return float(value)
    if dtype == torch.bool:
        return bool(value)
    return int(value)


def _one_to_one(irop: str, kind: str, arg_names: list[str]) -> Handler:
    """An ATen op whose schema arguments are the IR op's operands, in order."""
    if kind == "pointwise":

        def h(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
            return L.pointwise(irop, [L.operand(a[n]) for n in arg_names], L.rtype(node))
    else:

        def h(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
            return L.emit1(irop, [L.value(a[n]) for n in arg_names], L.rtype(node))

    return h


def _register_one_to_one() -> None:
    """The ATen overloads each IR op declares it maps from 1:1 (ops.def's
    "aten" column), checked against their schemas."""
    for irop in core.op_names():
        info = core.op_info(irop)
        for spec in info.aten:
            op = aten_op(*spec.split("."))
            if op is None:
                continue  # not in this PyTorch
            names = [arg.name for arg in op._schema.arguments if not arg.kwarg_only]
            if len(names) != info.num_operands:
                raise RuntimeError(
                    f"ops.def: '{irop}' takes {info.num_operands} operands but maps from "
                    f"aten.{spec}, which takes {len(names)} arguments"
                )
            register_op(op, _one_to_one(irop, info.kind, names))


_register_one_to_one()


def _gelu(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    approx = a.get("approximate") or "none"
    if approx not in ("none", "tanh"):
        raise Unsupported(approx)
    return L.pointwise("gelu", [L.operand(a["self"])], L.rtype(node), {"approximate": approx})


register(["gelu.default"], _gelu)


def _elu(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    """elu/selu/celu as ATen computes them (in f32 for f16 and bf16):
    x * scale where x > 0 (or NaN), else expm1(x * input_scale) * alpha * scale."""
    t = L.rtype(node)
    if not t.dtype.is_floating_point:
        raise Unsupported("elu of a non-floating tensor")
    x = opmath(L, L.value(a["self"]))
    ft = x.type
    alpha, scale, input_scale = (float(1.0 if a.get(k) is None else a[k]) for k in ("alpha", "scale", "input_scale"))
    inner = x if input_scale == 1 else L.pointwise("mul", [x, Lit(input_scale)], ft)
    negative = L.pointwise("expm1", [inner], ft)
    if alpha * scale != 1:
        negative = L.pointwise("mul", [negative, Lit(alpha * scale)], ft)
    positive = x if scale == 1 else L.pointwise("mul", [x, Lit(scale)], ft)
    at_most_zero = L.pointwise("le", [x, Lit(0.0)], ft.with_dtype(torch.bool))
    out = L.pointwise("where", [at_most_zero, negative, positive], ft)
    return out if ft.dtype == t.dtype else L.emit1("cast", [out], t)


register(["elu.default"], _elu)


def _scaled(L: Lowering, y: Any, alpha: Any) -> Any:
    """alpha * y for add/sub's alpha: folded into a literal, else a mul node."""
    if alpha is None or (not isinstance(alpha, bool) and alpha == 1):
        return y
    if isinstance(y, Lit) and y.const is None:
        return Lit(y.value * alpha)
    return L.emit1("mul", [y, Lit(alpha)], L.infer(torch.mul, y, alpha))


def _add_sub(irop: str, reverse: bool = False) -> Handler:
    def h(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
        x, y = L.operand(a["self"]), L.operand(a["other"])
        if reverse:  # rsub: other - alpha * self
            return L.pointwise(irop, [y, _scaled(L, x, a.get("alpha"))], L.rtype(node))
        return L.pointwise(irop, [x, _scaled(L, y, a.get("alpha"))], L.rtype(node))

    return h


register(["add.Tensor", "add.Scalar"], _add_sub("add"))
register(["sub.Tensor", "sub.Scalar"], _add_sub("sub"))
register(["rsub.Tensor", "rsub.Scalar"], _add_sub("sub", reverse=True))


def _bitwise_bool(irop: str, unary: bool = False) -> Handler:
    def h(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
        names = ["self"] if unary else ["self", "other"]
        ops = [L.operand(a[n]) for n in names]
        t = L.rtype(node)
        if (
            t.dtype != torch.bool
            or any(isinstance(o, Value) and o.type.dtype != torch.bool for o in ops)
            or any(isinstance(o, Lit) and not isinstance(o.value, bool) for o in ops)
        ):
            raise Unsupported("bitwise op on non-bool tensors")
        return L.pointwise(irop, ops, t)

    return h


register(["bitwise_and.Tensor", "bitwise_and.Scalar"], _bitwise_bool("logical_and"))
register(["bitwise_or.Tensor", "bitwise_or.Scalar"], _bitwise_bool("logical_or"))
register(["bitwise_not.default"], _bitwise_bool("logical_not", unary=True))


def _div_mode(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    x, y = L.operand(a["self"]), L.operand(a["other"])
    mode = a.get("rounding_mode")
    t = L.rtype(node)
    if mode is None:
        return L.pointwise("div", [x, y], t)
    if not t.dtype.is_floating_point or mode not in ("floor", "trunc"):
        raise Unsupported("integer division with rounding")
    q = L.pointwise("div", [x, y], L.infer(torch.div, x, y))
    return L.emit1(mode, [q], t)


register(["div.Tensor_mode", "div.Scalar_mode"], _div_mode)


def _clamp(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    x = L.operand(a["self"])
    lo, hi = a.get("min"), a.get("max")
    t = L.rtype(node)
    if lo is None and hi is None:
        raise Unsupported("clamp without bounds")
    if lo is not None and hi is not None:
        lo_o = L.operand(lo)
        mid = L.pointwise("maximum", [x, lo_o], L.infer(lambda u, v: torch.clamp(u, min=v), x, lo_o))
        return L.pointwise("minimum", [mid, L.operand(hi)], t)
    if lo is not None:
        return L.pointwise("maximum", [x, L.operand(lo)], t)
    return L.pointwise("minimum", [x, L.operand(hi)], t)


register(["clamp.default", "clamp.Tensor"], _clamp)


def _clamp_side(irop: str, key: str) -> Handler:
    def h(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
        return L.pointwise(irop, [L.operand(a["self"]), L.operand(a[key])], L.rtype(node))

    return h


def _hardtanh(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    x = L.operand(a["self"])
    lo, hi = a.get("min_val"), a.get("max_val")
    mid = L.pointwise("maximum", [x, L.operand(lo)], L.infer(lambda u: torch.clamp(u, min=lo), x))
    return L.pointwise("minimum", [mid, L.operand(hi)], L.rtype(node))


def _leaky_relu(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    # x > 0 ? x : x * slope, as ATen computes it
    x = L.value(a["self"])
    slope = a.get("negative_slope")
    slope = 0.01 if slope is None else slope
    cond = L.emit1("gt", [x, Lit(0)], L.infer(lambda u: u > 0, x))
    neg = L.emit1("mul", [x, Lit(slope)], L.infer(lambda u: u * slope, x))
    return L.emit1("where", [cond, x, neg], L.rtype(node))


register(["hardtanh.default"], _hardtanh)
register(["leaky_relu.default"], _leaky_relu)
register(["clamp_min.default", "clamp_min.Tensor"], _clamp_side("maximum", "min"))
register(["clamp_max.default", "clamp_max.Tensor"], _clamp_side("minimum", "max"))


# ---- copies, casts, aliases


def _passthrough(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    v = L.env.get(cast(fx.Node, node.args[0]))  # self: a tensor, so a node
    if v is None:
        raise Unsupported("alias of a non-value")
    return v


def _copy(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    src = L.env.get(cast(fx.Node, node.args[0]))  # self: a tensor, so a node
    if isinstance(src, Const) and src.is_scalar:
        return src  # a copy of a 0-d constant is the constant: a literal at its uses
    x = L.value(node.args[0])
    t = L.rtype(node)
    return L.emit1("cast" if t.dtype != x.type.dtype else "copy", [x], t)


def _to_copy(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    device = a.get("device")
    src = node.args[0]
    src_val = src.meta.get("val") if isinstance(src, fx.Node) else None
    if device is not None and isinstance(src_val, torch.Tensor) and torch.device(device) != src_val.device:
        raise Unsupported("device change")
    return _copy(L, node, a)


register(["alias.default", "detach.default", "lift_fresh.default"], _passthrough)
register(["clone.default", "lift_fresh_copy.default"], _copy)
register(["_to_copy.default"], _to_copy)
_convert = getattr(getattr(torch.ops, "prims", None), "convert_element_type", None)
if _convert is not None:
    register_op(_convert.default, _copy)


# ---- tensor factories


def _full(value_key: str | None, const: Any = None) -> Handler:
    def h(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
        t = L.rtype(node)
        v = const if value_key is None else a[value_key]
        if isinstance(v, fx.Node):
            o = L.operand(v)
            if isinstance(o, Value) and o.type.shape != ():
                raise Unsupported("non-scalar fill")
            if isinstance(o, Lit):
                o = Lit(_literal_for(o.value, t.dtype))
            return L.emit1("full", [o], t)
        if not isinstance(v, (bool, int, float)):
            raise Unsupported(f"fill value {v!r}")
        return L.emit1("full", [Lit(_literal_for(v, t.dtype))], t)

    return h


register(["full.default", "full_like.default", "new_full.default"], _full("fill_value"))
register(["scalar_tensor.default"], _full("s"))
register(["zeros.default", "zeros_like.default", "new_zeros.default"], _full(None, 0))
register(["ones.default", "ones_like.default", "new_ones.default"], _full(None, 1))

#: The most elements of an arange computed at capture (a constant of the graph).
ARANGE_MOST = 1 << 16


def _arange(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    """An arange of literal bounds (the indices of a triu/tril mask, a
    position table) is a constant of the graph, computed here once (equal ones
    are one constant): kernels then read it where every call would launch
    ATen's arange."""
    bounds: dict[str, Any] = {k: a.get(k) for k in ("start", "end", "step")}
    if any(isinstance(v, fx.Node) for v in bounds.values()):
        raise Unsupported("arange of run-time bounds")
    val = node.meta.get("val")
    # Integers only: a float arange's rounding may differ between CPU and GPU.
    if not isinstance(val, torch.Tensor) or val.is_floating_point() or val.numel() > ARANGE_MOST:
        raise Unsupported("arange not kept as a constant (floats, or too long)")
    start = 0 if bounds["start"] is None else bounds["start"]
    step = 1 if bounds["step"] is None else bounds["step"]
    key = (start, bounds["end"], step, val.dtype)
    if key not in L.aranges:
        value = torch.arange(start, bounds["end"], step, dtype=val.dtype)
        if value.shape != val.shape:
            raise Unsupported("arange of another length than traced")
        L.aranges[key] = Const("arange", value)
    return L.aranges[key]


register(["arange.default", "arange.start", "arange.start_step"], _arange)


# ---- reductions


def _cast_to(L: Lowering, x: Value, dtype: Any) -> Value:
    if dtype is None or dtype == x.type.dtype:
        return x
    return L.emit1("cast", [x], L.infer(lambda u: u.to(dtype), x))


def _reduce(irop: str, dim_key: str | None, with_dtype: bool = False, all_dims: bool = False) -> Handler:
    def h(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
        x = L.value(a["self"])
        if with_dtype:
            x = _cast_to(L, x, a.get("dtype"))
        rank = len(x.type.shape)
        dims = norm_dims(None if all_dims or dim_key is None else a.get(dim_key), rank)
        keepdim = bool(a.get("keepdim") or False) if not all_dims else False
        return L.emit1(irop, [x], L.rtype(node), {"dims": dims, "keepdim": keepdim})

    return h


register(["sum.dim_IntList"], _reduce("sum", "dim", with_dtype=True))
register(["sum.default"], _reduce("sum", None, with_dtype=True, all_dims=True))
register(["mean.dim"], _reduce("mean", "dim", with_dtype=True))
register(["mean.default"], _reduce("mean", None, with_dtype=True, all_dims=True))
register(["amax.default"], _reduce("amax", "dim"))
register(["amin.default"], _reduce("amin", "dim"))
register(["max.default"], _reduce("amax", None, all_dims=True))
register(["min.default"], _reduce("amin", None, all_dims=True))
register(["prod.dim_int"], _reduce("prod", "dim", with_dtype=True))
register(["prod.default"], _reduce("prod", None, with_dtype=True, all_dims=True))
register(["any.dim", "any.dims"], _reduce("any", "dim"))
register(["any.default"], _reduce("any", None, all_dims=True))


def _var(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    x = L.value(a["self"])
    return L.emit1("var", [x], L.rtype(node), var_attrs(a, len(x.type.shape)))


register(["var.correction"], _var)


def _arg_reduce(irop: str) -> Handler:
    def h(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
        x = L.value(a["self"])
        attrs: dict[str, Any] = {"keepdim": bool(a.get("keepdim") or False)}
        if a.get("dim") is not None:
            attrs["dim"] = norm_dim(int(a["dim"]), len(x.type.shape))
        return L.emit1(irop, [x], L.rtype(node), attrs)

    return h


register(["argmax.default"], _arg_reduce("argmax"))
register(["argmin.default"], _arg_reduce("argmin"))


def _softmax(irop: str, with_dtype: bool = False) -> Handler:
    def h(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
        x = L.value(a["self"])
        if with_dtype:
            x = _cast_to(L, x, a.get("dtype"))
        return L.emit1(irop, [x], L.rtype(node), {"dim": norm_dim(int(a["dim"]), len(x.type.shape))})

    return h


register(["_softmax.default"], _softmax("softmax"))
register(["_log_softmax.default"], _softmax("log_softmax"))
register(["softmax.int"], _softmax("softmax", with_dtype=True))
register(["log_softmax.int"], _softmax("log_softmax", with_dtype=True))


def _layer_norm(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    """native_layer_norm -> (out, mean, rstd). A training forward keeps mean
    and rstd for the backward: they are the mean and (biased) variance
    reductions over the same rows, which share the norm's Welford pass."""
    used = set()
    for u in node.users:
        if u.target is not operator.getitem:
            raise Unsupported("native_layer_norm's results used whole")
        used.add(u.args[1])
    x = L.value(a["input"])
    t0, mean_t, rstd_t = L.types(node)
    shape = tuple(int(d) for d in a["normalized_shape"])

    def affine(key: str, default: int) -> Value:
        """The weight or bias, or (F.layer_norm without it) ones or zeros of the normalized shape."""
        if a.get(key) is not None:
            return L.value(a[key])
        t = IRType(x.type.dtype, shape, contiguous_strides(shape))
        return L.emit1("full", [Lit(_literal_for(default, t.dtype))], t)

    eps = float(a["eps"])
    v = L.emit1("layer_norm", [x, affine("weight", 1), affine("bias", 0)], t0, {"ndims": len(shape), "eps": eps})
    mean = rstd = None
    rows = {"dims": list(range(len(x.type.shape) - len(shape), len(x.type.shape))), "keepdim": True}
    if 1 in used or 2 in used:
        wide = opmath(L, x)
        if 1 in used:
            mean = L.emit1("mean", [wide], mean_t, rows)
        if 2 in used:
            var = L.emit1("var", [wide], rstd_t, {**rows, "correction": 0})
            rstd = L.emit1("rsqrt", [L.emit1("add", [var, Lit(eps)], rstd_t)], rstd_t)
    return [v, mean, rstd]


register(["native_layer_norm.default"], _layer_norm)


def _scan(op: str) -> Handler:
    """cumsum / cumprod(self, dim, *, dtype=None): the input cast to dtype first, as ATen."""

    def lower(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
        x = _cast_to(L, L.value(a["self"]), a.get("dtype"))
        return L.emit1(op, [x], L.rtype(node), {"dim": norm_dim(int(a["dim"]), len(x.type.shape))})

    return lower


register(["cumsum.default"], _scan("cumsum"))
register(["cumprod.default"], _scan("cumprod"))


# ---- pooling


def _per_dim(v: Any, dims: int, default: Any = None) -> list[int]:
    """An int or a list of 1 or `dims` ints (ATen's pooling arguments) as `dims` ints."""
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        v = default
    v = [int(v)] if isinstance(v, int) else [int(e) for e in v]
    return v * dims if len(v) == 1 else v


def _pool(irop: str, dims: int, with_indices: bool = False) -> Handler:
    """max_poolNd / avg_poolNd (ATen's default overloads and max_pool's
    with_indices form when only the values are used) as one IR op."""

    def h(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
        if with_indices:
            for u in node.users:
                if u.target is not operator.getitem or u.args[1] != 0:
                    raise Unsupported("max_pool indices are used")
        kernel = _per_dim(a["kernel_size"], dims)
        attrs: dict[str, Any] = {
            "kernel": kernel,
            "stride": _per_dim(a.get("stride"), dims, kernel),
            "padding": _per_dim(a.get("padding", 0), dims),
            "ceil_mode": bool(a.get("ceil_mode", False)),
        }
        if irop == "max_pool":
            attrs["dilation"] = _per_dim(a.get("dilation", 1), dims)
        else:
            attrs["count_include_pad"] = bool(a.get("count_include_pad", True))
            if a.get("divisor_override") is not None:
                attrs["divisor_override"] = int(a["divisor_override"])
        x = L.value(a["self"])
        if len(kernel) != dims or len(x.type.shape) < dims + 1:
            raise Unsupported(f"{irop} of a rank-{len(x.type.shape)} input")
        v = L.emit1(irop, [x], L.types(node)[0] if with_indices else L.rtype(node), attrs)
        return [v, None] if with_indices else v

    return h


for _d in (1, 2, 3):
    register([f"max_pool{_d}d.default"], _pool("max_pool", _d))
    register([f"max_pool{_d}d_with_indices.default"], _pool("max_pool", _d, with_indices=True))
    register([f"avg_pool{_d}d.default"], _pool("avg_pool", _d))


def _adaptive_pool(irop: str, dims: int, with_indices: bool = False) -> Handler:
    """Adaptive pools whose output sizes divide the input's: equal windows, a
    plain pool, or to size 1 amax or mean over the pooled dims; others, whose
    windows differ in size, stay library calls."""

    def h(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
        if with_indices and any(u.target is not operator.getitem or u.args[1] != 0 for u in node.users):
            raise Unsupported("adaptive max pool indices are used")
        x = L.value(a["self"])
        rank = len(x.type.shape)
        out = _per_dim(a["output_size"], dims)
        size = list(x.type.shape[rank - dims :])
        if rank < dims + 1 or len(out) != dims or any(o <= 0 or i % o for i, o in zip(size, out)):
            raise Unsupported(f"adaptive pool from {size} to {out}")
        t = L.types(node)[0] if with_indices else L.rtype(node)
        if all(o == 1 for o in out):  # a reduction, not one thread walking every pixel of a window
            v = L.emit1(
                "amax" if irop == "max_pool" else "mean",
                [x],
                t,
                {"dims": list(range(rank - dims, rank)), "keepdim": True},
            )
        else:
            window = [i // o for i, o in zip(size, out)]
            attrs: dict[str, Any] = {"kernel": window, "stride": window, "padding": [0] * dims, "ceil_mode": False}
            attrs.update({"dilation": [1] * dims} if irop == "max_pool" else {"count_include_pad": True})
            v = L.emit1(irop, [x], t, attrs)
        return [v, None] if with_indices else v

    return h


for _d in (1, 2, 3):
    register([f"adaptive_max_pool{_d}d.default"], _adaptive_pool("max_pool", _d, with_indices=True))
    register([f"_adaptive_avg_pool{_d}d.default", f"adaptive_avg_pool{_d}d.default"], _adaptive_pool("avg_pool", _d))


# ---- matmul and convolution


def _addmm(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    attrs = {}
    for k in ("beta", "alpha"):
        v = a.get(k)
        if v is not None and not (v == 1 and not isinstance(v, bool)):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise Unsupported(f"{k}={v!r}")
            attrs[k] = v
    return L.emit1("addmm", [L.value(a["self"]), L.value(a["mat1"]), L.value(a["mat2"])], L.rtype(node), attrs)


register(["addmm.default"], _addmm)


def _convolution(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    ops = [L.value(a["input"]), L.value(a["weight"])]
    if a.get("bias") is not None:
        ops.append(L.value(a["bias"]))
    attrs = {
        "stride": [int(s) for s in a["stride"]],
        "padding": [int(s) for s in a["padding"]],
        "dilation": [int(s) for s in a["dilation"]],
        "transposed": bool(a["transposed"]),
        "output_padding": [int(s) for s in a["output_padding"]],
        "groups": int(a["groups"]),
    }
    return L.emit1("convolution", ops, L.rtype(node), attrs)


register(["convolution.default"], _convolution)
