"""Convolution results with the strides eager gives them.

On CUDA, torch.export records a conv's result contiguous where cuDNN returns
it channels-last (a channels-last input or weight): inside export's fake mode
`aten.convolution` answers with its meta kernel's strides, although the
backend it would run (asked the same way) chooses channels-last. The values
computed from the conv inherit those strides, so the captured graph would
write a model's output contiguous where eager's is channels-last, and copy the
conv's result into a layout nothing asked for. `faithful_conv_strides` asks
the backend for each conv's memory format and, where the recorded strides
differ, propagates the corrected ones through the whole graph.
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


def _eager_format(args: tuple) -> torch.memory_format | None:
    """The memory format eager's conv backend gives a 2-D or 3-D conv's
    result (None for others: 1-D convs are always contiguous)."""
    x, w, bias, stride, padding, dilation, transposed, output_padding, groups = args
    if w.dim() not in (4, 5):
        return None
    backend = torch._C._select_conv_backend(
        x,
        w,
        bias=bias,
        stride=stride,
        padding=padding,
        dilation=dilation,
        transposed=transposed,
        output_padding=output_padding,
        groups=groups,
    )
    return torch._C._conv_determine_backend_memory_format(x, w, backend)


class _EagerConvStrides(FakeTensorProp):
    """Fake propagation whose convolutions take their backend's memory format."""

    def call_function(self, target: Any, args: tuple, kwargs: dict) -> Any:
        out = super().call_function(target, args, kwargs)
        if target is aten.convolution.default and not kwargs:
            fmt = _eager_format(args)
            if fmt is not None and not out.is_contiguous(memory_format=fmt):
                out = out.clone(memory_format=fmt)
        return out


def faithful_conv_strides(ep: torch.export.ExportedProgram) -> bool:
    """Gives `ep`'s convolutions (and what follows them) eager's strides where
    the recorded ones differ. Returns whether any did."""
    convs = [n for n in ep.graph.nodes if n.op == "call_function" and n.target is aten.convolution.default]
    if not convs or any(n.kwargs for n in convs):
        return False
    mode = convs[0].meta["val"].fake_mode
    with mode:
        formats = [_eager_format(pytree.tree_map(_val, n.args)) for n in convs]
    if all(f is None or n.meta["val"].is_contiguous(memory_format=f) for n, f in zip(convs, formats)):
        return False
    inputs = [n.meta["val"] for n in ep.graph.nodes if n.op == "placeholder"]
    _EagerConvStrides(ep.graph_module, mode).propagate_dont_convert_inputs(*inputs)
    return True
