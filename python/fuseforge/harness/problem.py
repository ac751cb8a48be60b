"""Loading benchmark problem files.

A problem file defines ``class Model(nn.Module)``, ``get_inputs()`` and
``get_init_inputs()`` (see benchmarks/problems and /work/shared/problems/README.md).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["build_model", "load_problem", "problem_inputs", "problem_name"]


def problem_name(path: str | os.PathLike) -> str:
    """The problem's name: its file name without the ``.py`` suffix."""
    return os.path.splitext(os.path.basename(os.fspath(path)))[0]


def load_problem(path: str | os.PathLike) -> ModuleType:
    """Imports a problem file by path and returns the module.

    Each call executes the file afresh under a private module name derived from
    the absolute path, so two problems with the same file name never clash; the
    module stays registered in ``sys.modules`` under that name so that
    ``inspect`` can find the source of its classes. Raises FileNotFoundError for
    a missing file and ValueError when the file lacks ``Model``, ``get_inputs``
    or ``get_init_inputs``.
    """
    path = os.path.abspath(os.fspath(path))
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no problem file at {path}")
    digest = hashlib.sha1(path.encode()).hexdigest()[:12]
    mod_name = f"_fuseforge_problem_{problem_name(path)}_{digest}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(mod_name, None)
        raise
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(module, n)]
    if missing:
        raise ValueError(f"{path} is not a problem file: missing {', '.join(missing)}")
    return module


def build_model(problem_path: str | os.PathLike, mode: str | None, device: str) -> tuple[ModuleType, torch.nn.Module]:
    """A problem file's module and its Model, built after seeding 0 directly on
    `device` (parameters are initialized there: no host copy of a large
    model), in `mode` if given."""
    import torch

    mod = load_problem(problem_path)
    torch.manual_seed(0)
    with torch.device(device):
        model = mod.Model(*mod.get_init_inputs())
    if mode is not None:
        model.train(mode == "train")
    return mod, model.to(device)


def problem_inputs(mod: ModuleType, seed: int, device: str, dtype: torch.dtype | None = None) -> list:
    """The problem's get_inputs() drawn after seeding `seed`, created on
    `device` (a 4 GiB input is drawn on the GPU, not on the host and copied),
    floating tensors cast to `dtype` if given."""
    import torch

    torch.manual_seed(seed)
    with torch.device(device):
        raw = mod.get_inputs()
    out = []
    for x in raw:
        if isinstance(x, torch.Tensor):
            x = x.to(device)
            if dtype is not None and x.is_floating_point():
                x = x.to(dtype)
        out.append(x)
    return out
