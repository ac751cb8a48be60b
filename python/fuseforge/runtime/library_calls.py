"""Plan steps run as library calls. The torch expression of each IR op is
written once, in C++ (codegen/torch/library_call.cc, `Step.torch_expr`);
here it is compiled once per step into a function of the operand list.
`fuseforge emit` writes the same text into emitted files (emit.ops.step_expr),
so both run the very same calls."""
from __future__ import annotations

from typing import Any, Callable

import torch

from fuseforge._native import core

Call = Callable[[list[Any]], Any]


def make_call(step: core.Step, device: torch.device) -> Call:
    """The library call of a call step (or a kernel's node) as a function of
    its operand list: tensors for buffers, Python numbers for literals."""
    text = step.torch_expr([f"a[{i}]" for i in range(len(step.operands))])
    return eval(f"lambda a: {text}", {"torch": torch, "dev": device})  # noqa: S307 - the core's own text
