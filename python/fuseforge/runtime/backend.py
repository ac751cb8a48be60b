"""`torch.compile(model, backend="fuseforge")`, and with a precision policy
`torch.compile(model, backend="fuseforge", options={"precision": "tf32"})`.

Dynamo hands over an FX GraphModule of the user's code. Where the graph is
recorded for backward (grad mode, an input or lifted parameter that requires
grad), it goes through AOTAutograd with fuseforge's forward and backward
compilers (runtime/training.py). Otherwise the module is wrapped in an
OptimizedModule, which captures and compiles at its first real call and
re-specializes on new shapes like any fuseforge module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fuseforge.runtime.module import OptimizedModule
from fuseforge.runtime.precision import check_precision
from fuseforge.runtime.training import aot_compilers

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
    on_gpu = all(x.device.type == "cuda" for x in example_inputs if isinstance(x, torch.Tensor))
    if (
        on_gpu
        and torch.is_grad_enabled()
        and any(isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs)
    ):
        from torch._dynamo.backends.common import aot_autograd

        return aot_autograd(**aot_compilers(precision))(gm, example_inputs)
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
