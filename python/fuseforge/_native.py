"""Loads the C++ core and tells it where CUDA's run-time libraries live.

The core opens NVRTC and the driver with dlopen at first use, so it imports on
machines without a GPU. PyTorch's CUDA wheels ship NVRTC under
site-packages/nvidia/...; those folders are registered before anything compiles.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from fuseforge import _core  # noqa: F401  (re-exported)


def _library_dirs() -> list[str]:
    dirs: list[str] = []
    for base in map(Path, sys.path):
        nvidia = base / "nvidia"
        if nvidia.is_dir():
            dirs += [str(p) for p in sorted(nvidia.glob("*/lib")) if p.is_dir()]
    try:
        import torch

        dirs.append(str(Path(torch.__file__).parent / "lib"))
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            dirs.append(os.path.join(os.environ[env], "lib64"))
    dirs.append("/usr/local/cuda/lib64")
    # Newest CUDA first: cu13 before cuda_nvrtc (12.x wheels).
    dirs.sort(key=lambda d: "cu13" not in d)
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


for _d in _library_dirs():
    _core.add_library_search_dir(_d)

core = _core
