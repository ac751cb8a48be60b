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

__all__ = ["load_problem", "problem_name"]


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
