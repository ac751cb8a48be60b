"""`torch.compile(model, backend="fuseforge")`.

Dynamo hands over an FX GraphModule of the user's code (its example inputs may
be FakeTensors: they are not used here). The module is wrapped in an
OptimizedModule, which captures and compiles at its first real call and
re-specializes on new shapes like any fuseforge module.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from fuseforge.runtime.module import OptimizedModule


def fuseforge_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    return OptimizedModule(gm)


def _register() -> None:
    try:
        from torch._dynamo import register_backend
        from torch._dynamo.backends.registry import _BACKENDS
    except ImportError:  # pragma: no cover
        return
    if "fuseforge" not in _BACKENDS:
        register_backend(name="fuseforge")(fuseforge_backend)


_register()
