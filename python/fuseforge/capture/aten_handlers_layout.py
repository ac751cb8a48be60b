"""Handlers of ATen's layout ops: views, permutes, squeezes, slices,
selects, cat, flip and split. Each is one IR layout op (or a few), whose
strides follow its input's (cat's and flip's copies are contiguous)."""

from __future__ import annotations

from typing import Any

import torch.fx as fx

from fuseforge.capture.irtext import contiguous_strides
from fuseforge.capture.registry import Lowering, norm_dim, register
from fuseforge.capture.values import Unsupported


def _view(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    return L.emit1("view", [L.value(a["self"])], L.rtype(node))


def _expand(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    return L.emit1("expand", [L.value(a["self"])], L.rtype(node))


def _repeat(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    """x.repeat(r): a size-r dim before each of x's, expanded, copied, merged
    into x's (a contiguous tile), so that a repeated weight is a prepare step."""
    x = L.value(a["self"])
    reps = [int(r) for r in a["repeats"]]
    shape = [1] * (len(reps) - len(x.type.shape)) + list(x.type.shape)
    if x.type.strides != contiguous_strides(x.type.shape):
        raise Unsupported("repeat of a non-contiguous tensor")
    spread = L.emit1("view", [x], L.infer(lambda t: t.reshape([s for d in shape for s in (1, d)]), x))
    tiled = L.emit1(
        "expand", [spread], L.infer(lambda t: t.expand([s for r, d in zip(reps, shape) for s in (r, d)]), spread)
    )
    dense = L.emit1("copy", [tiled], L.infer(lambda t: t.contiguous(), tiled))
    return L.emit1("view", [dense], L.rtype(node))


def _permute(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    x = L.value(a["self"])
    rank = len(x.type.shape)
    return L.emit1("permute", [x], L.rtype(node), {"dims": [norm_dim(int(d), rank) for d in a["dims"]]})


def _transpose(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    x = L.value(a["self"])
    rank = len(x.type.shape)
    if rank == 0:
        return x
    d0, d1 = norm_dim(int(a["dim0"]), rank), norm_dim(int(a["dim1"]), rank)
    dims = list(range(rank))
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return L.emit1("permute", [x], L.rtype(node), {"dims": dims})


def _t(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    x = L.value(a["self"])
    if len(x.type.shape) < 2:
        return x
    return L.emit1("permute", [x], L.rtype(node), {"dims": [1, 0]})


def _unsqueeze(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    x = L.value(a["self"])
    return L.emit1("unsqueeze", [x], L.rtype(node), {"dim": norm_dim(int(a["dim"]), len(x.type.shape) + 1)})


def _squeeze(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    x = L.value(a["self"])
    rank = len(x.type.shape)
    d = a.get("dim", a.get("dims"))
    if isinstance(d, (list, tuple)):
        dims = [norm_dim(int(x), rank) for x in d]
    elif d is not None:
        dims = [norm_dim(int(d), rank)]
    else:
        dims = list(range(rank))
    return L.emit1("squeeze", [x], L.rtype(node), {"dims": sorted(set(dims))})


def _slice_bounds(size: int, start: Any, end: Any) -> tuple[int, int]:
    start = 0 if start is None else int(start)
    end = size if end is None else int(end)
    if start < 0:
        start += size
    if end < 0:
        end += size
    start = min(max(start, 0), size)
    end = min(max(end, start), size)
    return start, end


def _slice(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    x = L.value(a["self"])
    rank = len(x.type.shape)
    if rank == 0:
        raise Unsupported("slice of a 0-d tensor")
    dim = norm_dim(int(a["dim"]), rank)
    step = int(a.get("step") or 1)
    if step <= 0:
        raise Unsupported("non-positive step")
    start, end = _slice_bounds(x.type.shape[dim], a.get("start"), a.get("end"))
    return L.emit1("slice", [x], L.rtype(node), {"dim": dim, "start": start, "end": end, "step": step})


def _select(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    x = L.value(a["self"])
    rank = len(x.type.shape)
    dim = norm_dim(int(a["dim"]), rank)
    idx = int(a["index"])
    if idx < 0:
        idx += x.type.shape[dim]
    return L.emit1("select", [x], L.rtype(node), {"dim": dim, "index": idx})


def _cat(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    t = L.rtype(node)
    ops = []
    for x in a["tensors"]:
        v = L.value(x)
        if len(v.type.shape) == 1 and v.type.shape[0] == 0 and len(t.shape) != 1:
            continue  # legacy: empty 1-d tensors are skipped
        if v.type.dtype != t.dtype:
            v = L.emit1("cast", [v], v.type.with_dtype(t.dtype))
        ops.append(v)
    if not ops:
        raise Unsupported("cat of nothing")
    return L.emit1("cat", ops, t, {"dim": norm_dim(int(a["dim"]), len(t.shape))})


def _flip(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    """flip(self, dims): a copy reversed along the dims longer than 1 (a plain
    copy where none is). ATen's result keeps a permuted input's strides: such
    flips stay ATen calls, the IR's being contiguous."""
    x = L.value(a["self"])
    t = L.rtype(node)
    if t.strides != contiguous_strides(t.shape):
        raise Unsupported("flip with a non-contiguous result")
    rank = len(x.type.shape)
    dims = sorted({norm_dim(int(d), rank) for d in a["dims"]} - {d for d in range(rank) if x.type.shape[d] <= 1})
    if not dims:
        return L.emit1("copy", [x], t)
    return L.emit1("flip", [x], t, {"dims": dims})


def _split(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    x = L.value(a["self"])
    rank = len(x.type.shape)
    dim = norm_dim(int(a.get("dim") or 0), rank)
    types = L.types(node)
    out, start = [], 0
    for t in types:
        n = t.shape[dim]
        out.append(L.emit1("slice", [x], t, {"dim": dim, "start": start, "end": start + n, "step": 1}))
        start += n
    return out


def _unbind(L: Lowering, node: fx.Node, a: dict[str, Any]) -> Any:
    x = L.value(a["self"])
    dim = norm_dim(int(a.get("dim") or 0), len(x.type.shape))
    return [L.emit1("select", [x], t, {"dim": dim, "index": i}) for i, t in enumerate(L.types(node))]


register(["view.default", "_unsafe_view.default"], _view)
register(["expand.default"], _expand)
register(["repeat.default"], _repeat)
register(["permute.default"], _permute)
register(["transpose.int"], _transpose)
register(["t.default"], _t)
register(["unsqueeze.default"], _unsqueeze)
register(["squeeze.dim", "squeeze.dims", "squeeze.default"], _squeeze)
register(["slice.Tensor"], _slice)
register(["select.int"], _select)
register(["cat.default"], _cat)
register(["flip.default"], _flip)
register(["split.Tensor", "split_with_sizes.default"], _split)
register(["unbind.int"], _unbind)
