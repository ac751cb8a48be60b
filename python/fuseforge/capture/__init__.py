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
decompositions (the table; node_decompositions: node by node for graphs
that mutate nothing and repeat their nodes), irtext (IR text formatting), values and lowering
(the exported graph to IR text), aten_handlers (one handler per ATen op;
aten_handlers_layout: views, slices, cat; aten_handlers_reduce: reductions with
several results), export (torch.export and scalar lifting: ``capture``). Op facts (which ATen
overloads map 1:1 to IR ops, type promotion), dtype names and float text come
from the core. An opaque node runs as the core's torch expression of it
(``Step.torch_expr``).
"""

from __future__ import annotations

from fuseforge.capture.decompositions import decomposition_table
from fuseforge.capture.export import capture
from fuseforge.capture.graph import CapturedGraph, CaptureError, InputBinding, resolve_attribute

__all__ = [
    "CaptureError",
    "CapturedGraph",
    "InputBinding",
    "capture",
    "decomposition_table",
    "resolve_attribute",
]
