"""Capture: an ``nn.Module`` and example inputs -> fuseforge IR text.

The model is traced with ``torch.export.export`` (non-strict) and lowered to
core ATen with ``run_decompositions(decomposition_table())``; every ATen node
then becomes one IR node (or a few: ``clamp`` is a ``maximum`` and a
``minimum``), and ATen ops without an IR counterpart become ``opaque`` nodes that
the runtime executes through ATen. The text form is the one of docs/IR.md and
is printed exactly as the C++ printer would print it, so
``print(parse(text)) == text``.

Nothing is computed on real data: export traces with fake tensors. Tensors may
live on the CPU, on a CUDA device, or on the ``meta`` device (a model and inputs
built under ``torch.device("meta")`` capture without allocating anything).

The modules, by job: graph (CapturedGraph, InputBinding, CaptureError),
decompositions (the table), irtext (IR text formatting), values and lowering
(the exported graph to IR text), aten_handlers (one handler per ATen op),
export (torch.export and scalar lifting: ``capture``), opaque (opaque nodes'
argument expressions at run time).
"""
from __future__ import annotations

from fuseforge.capture.decompositions import decomposition_table
from fuseforge.capture.export import capture
from fuseforge.capture.graph import CaptureError, CapturedGraph, InputBinding, resolve_attribute
from fuseforge.capture.irtext import format_float
from fuseforge.capture.opaque import (
    compile_opaque_args,
    compile_opaque_call,
    decode_opaque_args,
    resolve_target,
    run_opaque,
)

__all__ = [
    "CaptureError",
    "CapturedGraph",
    "InputBinding",
    "capture",
    "compile_opaque_args",
    "compile_opaque_call",
    "decode_opaque_args",
    "decomposition_table",
    "format_float",
    "resolve_attribute",
    "resolve_target",
    "run_opaque",
]
