"""Convolution results with the strides eager gives them.

torch.export keeps `aten.conv2d` (and conv1d/conv3d) whole while it traces and
learns its result's strides without the device: on CUDA it records a
contiguous result where cuDNN returns a channels-last one for a channels-last
input or weight, and the values computed from it inherit those strides. The
captured graph would then write a model's output contiguous where eager's is
channels-last, and copy the conv's result into a layout nothing asked for.
`faithful_conv_strides` asks the fake `aten.convolution` again (it chooses the
backend, and so the memory format, as eager does) and, where any answer
differs, propagates the corrected strides through the whole graph.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx
from torch.fx.passes.fake_tensor_prop import FakeTensorProp
from torch.utils import _pytree as pytree

aten = torch.ops.aten


def _val(a: Any) -> Any:
    return a.meta["val"] if isinstance(a, fx.Node) else a


def faithful_conv_strides(ep: torch.export.ExportedProgram) -> bool:
    """Recomputes the fake values of `ep`'s graph if a convolution's recorded
    strides are not the ones its fake kernel gives. Returns whether it did."""
    convs = [n for n in ep.graph.nodes if n.op == "call_function" and n.target is aten.convolution.default]
    if not convs:
        return False
    mode = convs[0].meta["val"].fake_mode
    stale = False
    with mode:
        for n in convs:
            out = n.target(*pytree.tree_map(_val, n.args), **pytree.tree_map(_val, n.kwargs))
            stale |= out.stride() != n.meta["val"].stride()
    if stale:
        inputs = [n.meta["val"] for n in ep.graph.nodes if n.op == "placeholder"]
        FakeTensorProp(ep.graph_module, mode).propagate_dont_convert_inputs(*inputs)
    return stale
