"""`torch.compile(model, backend="fuseforge")`, and with a precision policy
`torch.compile(model, backend="fuseforge", options={"precision": "tf32"})`.

Dynamo hands over an FX GraphModule of the user's code, its parameters and
buffers lifted to inputs. On CUDA it goes through AOTAutograd with
fuseforge's compilers (runtime/training.py): a forward and a backward graph
where the call is recorded for backward, else one inference graph, whose
buffer updates (train-mode running statistics) the plan writes into the
buffers (AOTAutograd's write-back then copies a tensor onto itself) and
whose parameters are marked so that the plan prepares what derives from
them once. Dynamo guards and recompiles on new shapes. Graphs of CPU tensors
go to an OptimizedModule, which runs them eagerly with one warning.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fuseforge.runtime.module import OptimizedModule
from fuseforge.runtime.precision import check_precision
from fuseforge.runtime.training import aot_dynamo_graph

#: The options `torch.compile(..., options=...)` may pass.
OPTIONS = ("precision",)


def fuseforge_backend(
    gm: torch.fx.GraphModule, example_inputs: list[Any], *, options: dict | None = None, mode: str | None = None
) -> Callable[..., Any]:
    """The module dynamo captured, run by fuseforge. `options`: {"precision":
    one of fuseforge.runtime.precision.PRECISIONS} (default "fp32"); `mode`
    (torch.compile's) changes nothing here. Raises ValueError naming an
    unknown option or precision."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(
            f"fuseforge backend: unknown option(s) {', '.join(map(repr, unknown))}; it takes {', '.join(OPTIONS)}"
        )
    precision = options.get("precision", "fp32")
    check_precision(precision)
    tensors = [x for x in example_inputs if isinstance(x, torch.Tensor)]
    if tensors and all(x.device.type == "cuda" for x in tensors):
        return aot_dynamo_graph(gm, example_inputs, precision)
    return OptimizedModule(gm, precision=precision)


def _register() -> None:
    try:
        from torch._dynamo import register_backend
        from torch._dynamo.backends.registry import _BACKENDS
    except ImportError:  # pragma: no cover
        return
    if "fuseforge" not in _BACKENDS:
        register_backend(name="fuseforge")(fuseforge_backend)


_register()
