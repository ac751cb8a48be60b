"""The decomposition table capture lowers to core ATen with: torch.export's
default one minus the ops fuseforge keeps whole, plus batch and group norm
decompositions of ours, and the gradients of average and max pooling
where the windows tile the input (a broadcast, a masked broadcast)."""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
from collections.abc import Callable, Collection, Iterator
from typing import Any

import torch
import torch.export.exported_program
from torch._prims_common import suggest_memory_format

from fuseforge.capture.node_decompositions import decompose_by_node

aten = torch.ops.aten

# Ops that stay whole although the default table decomposes them: RNNs (an
# unrolled LSTM is thousands of nodes and much slower than cuDNN; a cell
# stepped in a loop is one step's linears and gate math, which fuse, and
# decomposes), pooling (an
# IR op of its own, max_pool/avg_pool),
# resampling, padding and attention, whose decompositions are gathers or worse
# than the library kernels (the CPU flash attention's also returns the
# attention weights where its backward, in a traced training step, reads the
# logsumexp), and silu (one IR op). Batch norm (train and eval)
# and group norm get decompositions of ours below: one statistics pass and
# per-channel pointwise math that fuses with its neighbours (measured on H100:
# small_convnet 0.95x -> 1.38x eager, conv2d_groupnorm_silu 0.93x -> 1.23x);
# the statistics and the math become one reduction kernel. logsumexp stays
# one IR op: a kernel computes it in one pass (running max and sum of exp).
_KEEP_WHOLE = {
    "lstm",
    "gru",
    "rnn_tanh",
    "rnn_relu",
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "max_pool1d_with_indices",
    "max_pool2d_with_indices",
    "max_pool3d_with_indices",
    "adaptive_max_pool1d",
    "native_layer_norm",
    "_softmax",
    "_log_softmax",
    "convolution",
    "native_batch_norm",
    "_native_batch_norm_legit",
    "cudnn_batch_norm",
    "upsample_nearest1d",
    "upsample_nearest2d",
    "upsample_nearest3d",
    "upsample_linear1d",
    "upsample_bilinear2d",
    "upsample_bicubic2d",
    "upsample_trilinear3d",
    "_upsample_nearest_exact1d",
    "_upsample_nearest_exact2d",
    "_upsample_nearest_exact3d",
    "_upsample_bilinear2d_aa",
    "_upsample_bicubic2d_aa",
    "reflection_pad1d",
    "reflection_pad2d",
    "reflection_pad3d",
    "replication_pad1d",
    "replication_pad2d",
    "replication_pad3d",
    "im2col",
    "col2im",
    "embedding_bag",
    "scaled_dot_product_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "silu",
    "logsumexp",
}


def _compute_input(x: torch.Tensor) -> torch.Tensor:
    """Norms compute in f32 for f16/bf16 inputs, as ATen's kernels do."""
    return x.to(torch.float32) if x.dtype in (torch.float16, torch.bfloat16) else x


def _normalize(
    x: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None
) -> torch.Tensor:
    """(x - mean) * rstd * weight + bias with per-channel (dim 1) weight and
    bias, in x's compute dtype, rounded to x's dtype; mean and rstd broadcast."""
    channels = [1, x.shape[1]] + [1] * (x.dim() - 2)
    out = (_compute_input(x) - mean) * rstd
    if weight is not None:
        out = out * weight.reshape(channels)
    if bias is not None:
        out = out + bias.reshape(channels)
    return out.to(x.dtype)


def _batch_norm_eval(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    momentum: float,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eval-mode batch norm as per-channel pointwise math (torch's own
    decomposition calls the non-functional `_native_batch_norm_legit`, which
    export rejects)."""
    channels = [1, -1] + [1] * (x.dim() - 2)
    out = _normalize(x, running_mean.reshape(channels), torch.rsqrt(running_var + eps).reshape(channels), weight, bias)
    empty = x.new_zeros((0,))
    return out, empty, empty


def _batch_norm_train(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[torch.Tensor, ...]:
    """Train-mode batch norm as one statistics pass (var_mean over all dims but
    the channels), per-element math that fuses with its neighbours, and the
    running-statistics update (unbiased variance, as ATen)."""
    if not training:
        out, empty, _ = _batch_norm_eval(x, weight, bias, running_mean, running_var, momentum, eps)
        return out, empty, empty, running_mean, running_var
    var, mean = torch.var_mean(_compute_input(x), dim=[0] + list(range(2, x.dim())), correction=0)
    rstd = torch.rsqrt(var + eps)
    channels = [1, -1] + [1] * (x.dim() - 2)
    out = _normalize(x, mean.reshape(channels), rstd.reshape(channels), weight, bias)
    n = x.numel() // x.shape[1]
    new_mean = running_mean * (1 - momentum) + mean * momentum
    new_var = running_var * (1 - momentum) + var * (n / max(n - 1, 1)) * momentum
    return out, mean, rstd, new_mean, new_var


def _batch_norm_no_stats(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, training: bool, momentum: float, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Batch norm with the batch's statistics and no running ones: what
    instance norm becomes (on the [1, N*C, ...] view of its input)."""
    var, mean = torch.var_mean(_compute_input(x), dim=[0] + list(range(2, x.dim())), correction=0)
    rstd = torch.rsqrt(var + eps)
    channels = [1, -1] + [1] * (x.dim() - 2)
    return _normalize(x, mean.reshape(channels), rstd.reshape(channels), weight, bias), mean, rstd


def _group_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    n: int,
    c: int,
    hw: int,
    groups: int,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Group norm on the [N, groups, C / groups, HW] view of its input: the
    statistics per group and the per-element math there (per-channel weight
    and bias viewed alike), so that one reduction kernel computes both; the
    result is viewed back (pointwise_before_view moves the ops after it in)."""
    xg = _compute_input(x).reshape(n, groups, c // groups, -1)
    var, mean = torch.var_mean(xg, dim=[2, 3], correction=0, keepdim=True)
    rstd = torch.rsqrt(var + eps)
    out = (xg - mean) * rstd
    per_channel = [1, groups, c // groups, 1]
    if weight is not None:
        out = out * weight.reshape(per_channel)
    if bias is not None:
        out = out + bias.reshape(per_channel)
    return out.to(x.dtype).reshape(x.shape), mean.reshape(n, groups), rstd.reshape(n, groups)


def _group_norm_for_training(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    n: int,
    c: int,
    hw: int,
    groups: int,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Group norm with every full-size tensor in its input's own shape, for
    graphs that are differentiated: per-channel statistics over the spatial
    dims, combined into each group's (equal counts: the group's variance is
    the mean of its channels' variances plus that of their means around the
    group's mean), then x * scale + shift with per-sample, per-channel scale
    and shift (ATen's CUDA kernel's form). The backward autograd derives from
    it then reduces and scales full-size tensors in that one shape, where
    that of _group_norm's grouped view recomputes the normalization there
    and must write it out to meet the per-channel sums across the reshape.
    An inference graph AOTAutograd traces with this table (grad off) keeps
    _group_norm's form, which one kernel computes."""
    if not torch.is_grad_enabled():
        return _group_norm(x, weight, bias, n, c, hw, groups, eps)
    xc = _compute_input(x)
    per_channel = [n, c] + [1] * (x.dim() - 2)
    if x.dim() == 2:  # no spatial dims: each channel's statistics are its one value's
        var_c, mean_c = torch.zeros_like(xc), xc
    else:
        var_c, mean_c = torch.var_mean(xc, dim=list(range(2, x.dim())), correction=0)
    grouped = (n, groups, c // groups)
    mean_g = mean_c.reshape(grouped)
    mean = mean_g.mean(2, keepdim=True)
    var = (var_c.reshape(grouped) + (mean_g - mean).square()).mean(2, keepdim=True)
    rstd = torch.rsqrt(var + eps)
    scale = rstd.expand(grouped)
    if weight is not None:
        scale = scale * weight.reshape(1, *grouped[1:])
    shift = -mean * scale
    if bias is not None:
        shift = shift + bias.reshape(1, *grouped[1:])
    out = xc * scale.reshape(per_channel) + shift.reshape(per_channel)
    return out.to(x.dtype), mean.reshape(n, groups), rstd.reshape(n, groups)


def _instance_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    use_input_stats: bool,
    momentum: float,
    eps: float,
    cudnn_enabled: bool,
) -> torch.Tensor:
    """Instance norm on its input's own shape: statistics over the spatial
    dims per sample and channel, per-channel weight and bias. ATen's
    composite views the input as [1, N*C, ...] for a batch norm, which a
    channels-last input (a conv's result) cannot be viewed as without a copy;
    here a channels-last input is reduced where it is. Running statistics
    follow ATen's: each sample's batch-norm update (unbiased variance),
    averaged over the samples."""
    if not use_input_stats:
        if running_mean is None or running_var is None:  # ATen's check, in its words
            raise RuntimeError("Expected running_mean and running_var to be defined when use_input_stats is false")
        return _batch_norm_eval(x, weight, bias, running_mean, running_var, momentum, eps)[0]
    var, mean = torch.var_mean(_compute_input(x), dim=list(range(2, x.dim())), correction=0, keepdim=True)
    out = _normalize(x, mean, torch.rsqrt(var + eps), weight, bias)
    n, c = x.shape[0], x.shape[1]
    if running_mean is not None:
        running_mean.copy_(running_mean * (1 - momentum) + mean.reshape(n, c).mean(0) * momentum)
    if running_var is not None:
        count = x.numel() // (n * c)
        unbiased = var.reshape(n, c) * (count / max(count - 1, 1))
        running_var.copy_(running_var * (1 - momentum) + unbiased.mean(0) * momentum)
    return out


def _tiling_windows(
    spatial: int, grad: torch.Tensor, x: torch.Tensor, kernel_size: list[int], stride: list[int], padding: list[int]
) -> tuple[list[int], list[int], list[int]] | None:
    """(kernel, windows, input extent) per pooled dim where the windows tile
    the input without overlap or padding (stride = kernel, each window whole;
    rows and columns past the last window lie in none); else None.
    `spatial`: the pooled dims, the last ones of `x` and `grad`."""

    def per_dim(v: list[int]) -> list[int]:  # ATen's [k] means [k] * spatial
        return list(v) * spatial if len(v) == 1 else list(v)

    k, s = per_dim(kernel_size), per_dim(stride) or per_dim(kernel_size)
    out, full = list(grad.shape[-spatial:]), list(x.shape[-spatial:])
    if s != k or any(padding) or any(o * kk > f for o, kk, f in zip(out, k, full)):
        return None
    return k, out, full


def _windows_to_input(up: torch.Tensor, k: list[int], out: list[int], full: list[int], x: torch.Tensor) -> torch.Tensor:
    """A gradient computed per window cell, [..., o0, k0, o1, k1, ...], as the
    input's: the cells merged, zeros past the last window, in the input's
    memory format, as ATen's gradients are."""
    up = up.reshape(list(up.shape[: up.dim() - 2 * len(k)]) + [o * kk for o, kk in zip(out, k)])
    pad = [e for o, kk, f in reversed(list(zip(out, k, full))) for e in (0, f - o * kk)]
    up = torch.nn.functional.pad(up, pad) if any(pad) else up
    return up.contiguous(memory_format=suggest_memory_format(x))


def _avg_pool_backward(
    spatial: int,
    grad: torch.Tensor,
    x: torch.Tensor,
    kernel_size: list[int],
    stride: list[int],
    padding: list[int],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
) -> torch.Tensor:
    """Average pooling's gradient where the windows tile the input
    (_tiling_windows): every input element gets its window's gradient over
    the window's size, a broadcast that fuses with the pointwise work before
    it. Other poolings keep ATen's kernel. `spatial`: the pooled dims."""
    tiling = _tiling_windows(spatial, grad, x, kernel_size, stride, padding)
    if tiling is None:
        return NotImplemented
    k, out, full = tiling
    lead = list(grad.shape[:-spatial])
    windows = lead + [e for o in out for e in (o, 1)]
    cells = lead + [e for o, kk in zip(out, k) for e in (o, kk)]
    up = (grad / (divisor_override or math.prod(k))).reshape(windows).expand(cells)
    return _windows_to_input(up, k, out, full, x)


def _max_pool_backward(
    spatial: int,
    grad: torch.Tensor,
    x: torch.Tensor,
    kernel_size: list[int],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    ceil_mode: bool,
    indices: torch.Tensor,
) -> torch.Tensor:
    """Max pooling's gradient where the windows tile the input
    (_tiling_windows) undilated: each input element lies in one window and
    gets its window's gradient where the forward's index names it, else zero.
    That is a broadcast and a compare with the element's own flat index,
    pointwise work that fuses with the activation's and the norm's gradients
    around it, where ATen's kernel scatters into a gradient written and read
    back whole; the values are ATen's exactly (no sums). Other poolings keep
    ATen's kernel. `spatial`: the pooled dims."""
    tiling = _tiling_windows(spatial, grad, x, kernel_size, stride, padding)
    if tiling is None or any(d != 1 for d in dilation):
        return NotImplemented
    k, out, full = tiling
    windows = list(grad.shape[:-spatial]) + [e for o in out for e in (o, 1)]
    # Each cell's flat index in its input plane, as ATen's indices count:
    # the sum over the pooled dims of (window * kernel + offset) * the dim's
    # stride in the plane, built from small aranges that broadcast.
    position = torch.zeros((), dtype=indices.dtype, device=indices.device)
    plane_stride = math.prod(full)
    for d, (o, kk, f) in enumerate(zip(out, k, full)):
        plane_stride //= f
        at = [1] * (2 * spatial)
        at[2 * d] = o
        window = torch.arange(o, dtype=indices.dtype, device=indices.device).reshape(at) * (kk * plane_stride)
        at[2 * d], at[2 * d + 1] = 1, kk
        offset = torch.arange(kk, dtype=indices.dtype, device=indices.device).reshape(at) * plane_stride
        position = position + window + offset
    picked = indices.reshape(windows) == position
    return _windows_to_input(torch.where(picked, grad.reshape(windows), 0.0), k, out, full, x)


def _convolution_backward(
    grad: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias_sizes: list[int] | None,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    transposed: bool,
    output_padding: list[int],
    groups: int,
    output_mask: list[bool],
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """A conv's bias gradient as the plan's own sum over the incoming
    gradient's batch and spatial dims: a reduction kernel, which shares its
    partial sums with other sums of that gradient (a learned offset's) where
    they meet, instead of ATen's separate pass within the conv's backward.
    The data and weight gradients stay ATen's (cuDNN)."""
    if not output_mask[2]:
        return NotImplemented
    grad_bias = grad.sum([0, *range(2, grad.dim())])
    grad_x, grad_weight, _ = aten.convolution_backward.default(
        grad,
        x,
        weight,
        bias_sizes,
        stride,
        padding,
        dilation,
        transposed,
        output_padding,
        groups,
        [output_mask[0], output_mask[1], False],
    )
    return grad_x, grad_weight, grad_bias


_TABLE: dict | None = None


def decomposition_table(training: bool = False) -> dict:
    """torch.export's default decompositions minus the ops fuseforge keeps whole
    (a fresh dict: run_decompositions consumes the one it is given).
    `training`: for graphs AOTAutograd differentiates (group norm in the form
    whose backward stays in the input's shape)."""
    global _TABLE
    if _TABLE is None:
        table = dict(torch.export.default_decompositions().items())
        for op in list(table):
            parts = str(op).split(".")
            if parts[0] == "aten" and len(parts) == 3 and parts[1] in _KEEP_WHOLE:
                del table[op]
        table[aten._native_batch_norm_legit_no_training.default] = _batch_norm_eval
        table[aten.native_group_norm.default] = _group_norm
        table[aten._native_batch_norm_legit_functional.default] = _batch_norm_train
        table[aten._native_batch_norm_legit.no_stats] = _batch_norm_no_stats
        table[aten.instance_norm.default] = _instance_norm
        table[aten.avg_pool2d_backward.default] = functools.partial(_avg_pool_backward, 2)
        table[aten.avg_pool3d_backward.default] = functools.partial(_avg_pool_backward, 3)
        # 2-D only (1-D max pools run as 2-D ones): the 3-D form's masks, in
        # 8-D shapes of innermost extent 2, ran slower than ATen's kernel
        # (H200: conv3d + relu + 2x2x2 max pool's training step 4.1 -> 5.5 ms).
        table[aten.max_pool2d_with_indices_backward.default] = functools.partial(_max_pool_backward, 2)
        _TABLE = table
    table = dict(_TABLE)
    if training:
        table[aten.native_group_norm.default] = _group_norm_for_training
        table[aten.convolution_backward.default] = _convolution_backward
    return table


_F_INSTANCE_NORM = inspect.signature(torch.nn.functional.instance_norm)


class _OwnInstanceNorm(torch.overrides.TorchFunctionMode):
    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Collection[type],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func is torch.nn.functional.instance_norm:  # what dynamo records
            bound = _F_INSTANCE_NORM.bind(*args, **kwargs)
            bound.apply_defaults()
            a = bound.arguments
            return _instance_norm(
                a["input"],
                a["weight"],
                a["bias"],
                a["running_mean"],
                a["running_var"],
                a["use_input_stats"],
                a["momentum"],
                a["eps"],
                False,
            )
        if func is torch.instance_norm:
            return _instance_norm(*args, **kwargs)
        return func(*args, **kwargs)


@contextlib.contextmanager
def own_instance_norm() -> Iterator[None]:
    """Within it, `torch.instance_norm` traces as the table's _instance_norm.
    AOTAutograd decomposes a CompositeImplicitAutograd op by its own kernel
    before a decomposition table is consulted, and ATen's views the input as
    a [1, N*C, ...] batch norm; export's retrace takes the table's form, so
    without this `optimize` and the backend would build different plans."""
    with _OwnInstanceNorm():
        yield


_CIA: tuple[set, set] | None = None  # (CIA ops export overrides, CIA ops left to their own kernel)


def _cia_split() -> tuple[set, set] | None:
    """torch's functional CompositeImplicitAutograd ops split in two: those
    export must override while it retraces (kept whole, or decomposed by a
    Python function) and those decomposed by their own CIA kernel. None where
    export's helper moved."""
    global _CIA
    collect = getattr(torch.export.exported_program, "_collect_all_valid_cia_ops", None)
    if collect is None:
        return None
    if _CIA is None:
        table = decomposition_table()
        every = set(collect())
        own = {op for op in every if _is_own_cia_kernel(table.get(op))}
        _CIA = every - own, own
    return _CIA


def _is_own_cia_kernel(fn: object) -> bool:
    """Whether a table entry decomposes its op by the op's own CIA kernel
    (export's default entry for most CIA ops; a few have Python
    decompositions instead, matmul's among them)."""
    return getattr(getattr(fn, "func", None), "__name__", None) == "_special_op_to_decompose_cia"


@contextlib.contextmanager
def _overriding_only(ops: set) -> Iterator[None]:
    module = torch.export.exported_program
    collect = module._collect_all_valid_cia_ops
    module._collect_all_valid_cia_ops = lambda: set(ops)
    try:
        yield
    finally:
        module._collect_all_valid_cia_ops = collect


def run_decompositions(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """`ep` lowered to core ATen with decomposition_table(), the ops kept whole
    left whole: node by node where the graph mutates nothing
    (node_decompositions.py), else by export's whole re-trace."""
    split = _cia_split()
    if split is not None:
        table = decomposition_table()
        kept_whole = {op for op in split[0] if op not in table}

        def decomposes(op: object) -> bool:
            # The table's ops, and the CIA ops export does not keep (views such as reshape and chunk).
            return op in table or (
                isinstance(op, torch._ops.OpOverload)
                and op not in kept_whole
                and torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")
            )

        by_node = decompose_by_node(ep, decomposes, _retrace)
        if by_node is not None:
            return by_node
    return _retrace(ep)


def _retrace(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """Export's run_decompositions with decomposition_table().

    run_decompositions registers an override on every functional
    CompositeImplicitAutograd op torch has (564) and removes it again: about
    0.25 s per capture, most of a cached compile. Only the CIA ops kept whole
    (absent from the table) need one, those the table decomposes by a Python
    function, and those in the graph (whose kernels then run as export runs
    them); the others, reached only inside a kernel, decompose by their own
    CIA kernel, which is what the table's entry for them does too. So export
    is shown only the former, and the table hands it no entry for the others.
    tests/python/test_capture.py checks that the graphs are the same."""
    split = _cia_split()
    table = decomposition_table()
    if split is None:
        return ep.run_decompositions(table)
    overridden, own_kernel = split
    in_graph = {n.target for n in ep.graph.nodes if n.op == "call_function"}
    for op in own_kernel - in_graph:
        table.pop(op, None)
    with _overriding_only(overridden | (own_kernel & in_graph)):
        return ep.run_decompositions(table)
