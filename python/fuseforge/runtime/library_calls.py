"""Plan steps run as library calls. The torch expression of each IR op is
written once, in C++ (codegen/torch/library_call.cc, `Step.torch_expr`);
here each distinct expression is compiled once into a function of the operand list.
`fuseforge emit` writes the same text into emitted files (emit.ops.step_expr),
so both run the very same calls.

A convolution carrying the fp32_precision its conv_precision pass decided
runs through `_ff_convolution`, which emitted files carry verbatim (hence the
prefix)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from fuseforge._native import core

Call = Callable[[list[Any]], Any]


# _ff_conv_fp32 and _ff_convolution are copied verbatim into emitted files:
# they use only contextlib and torch, and annotations that need no import.
@contextlib.contextmanager
def _ff_conv_fp32(value: str) -> "Iterator[None]":  # noqa: UP037 - quoted: emitted copies import no Iterator
    """Within it, cuDNN convolutions compute f32 as `value` ("ieee" or "tf32");
    the user's setting comes back after (torch < 2.9: the allow_tf32 switch)."""
    cudnn = torch.backends.cudnn
    conv = getattr(cudnn, "conv", None)
    saved = conv.fp32_precision if conv is not None else cudnn.allow_tf32
    if conv is not None:
        conv.fp32_precision = value
    else:
        cudnn.allow_tf32 = value == "tf32"
    try:
        yield
    finally:
        if conv is not None:
            conv.fp32_precision = saved
        else:
            cudnn.allow_tf32 = saved


def _ff_convolution(fp32_precision: str, *args: object) -> torch.Tensor:
    """aten.convolution with cuDNN's f32 math as the conv's fp32_precision says."""
    with _ff_conv_fp32(fp32_precision):
        return torch.ops.aten.convolution.default(*args)


#: The names step expressions may use besides torch and dev (emitted files define them too).
HELPERS = (_ff_conv_fp32, _ff_convolution)

#: Within `conv_fp32_precision(value)`, cuDNN convolutions compute f32 as
#: `value` ("ieee" or "tf32"); the user's setting comes back after.
conv_fp32_precision = _ff_conv_fp32


def make_call(step: core.Step, device: torch.device) -> Call:
    """The library call of a call step (or a kernel's node) as a function of
    its operand list: tensors for buffers, Python numbers for literals."""
    return _compiled(step.torch_expr([f"a[{i}]" for i in range(len(step.operands))]), device)


@functools.lru_cache(maxsize=4096)
def _compiled(text: str, device: torch.device) -> Call:
    """`text` over the operand list `a` as a function, compiled once per text
    and device: an unrolled loop's thousands of steps share a few texts, and
    compiling each anew took most of a warm start's plan setup."""
    namespace = {"torch": torch, "dev": device, **{f.__name__: f for f in HELPERS}}
    return eval(f"lambda a: {text}", namespace)  # noqa: S307 - the core's own text
