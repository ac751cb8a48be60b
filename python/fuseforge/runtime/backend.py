"""`torch.compile(model, backend="fuseforge")`, and with a precision policy
`torch.compile(model, backend="fuseforge", options={"precision": "tf32"})`.

Dynamo hands over an FX GraphModule of the user's code (its example inputs may
be FakeTensors: they are not used here). The module is wrapped in an
OptimizedModule, which captures and compiles at its first real call and
re-specializes on new shapes like any fuseforge module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fuseforge.runtime.module import OptimizedModule

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
    return OptimizedModule(gm, precision=options.get("precision", "fp32"))


def _register() -> None:
    try:
        from torch._dynamo import register_backend
        from torch._dynamo.backends.registry import _BACKENDS
    except ImportError:  # pragma: no cover
        return
    if "fuseforge" not in _BACKENDS:
        register_backend(name="fuseforge")(fuseforge_backend)


_register()
