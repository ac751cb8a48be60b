"""Loads the C++ core and tells it where CUDA's run-time libraries and headers live.

The core opens NVRTC and the driver with dlopen at first use, so it imports on
machines without a GPU. PyTorch's CUDA wheels ship NVRTC under
site-packages/nvidia/...; those folders are registered before anything compiles.
GEMM kernels include CUTLASS's headers (from the nvidia-cutlass wheel, a pinned
dependency) and libcu++'s cuda/std ones (CUDA toolkit or wheel); without both,
matmuls run as library calls (gemm_headers_missing says why). By default only
f32 matmuls become GEMM kernels (FUSEFORGE_GEMM=1: every dtype; =0: none).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from fuseforge import _core  # noqa: F401  (re-exported)
from fuseforge.runtime.cutlass_headers import cutlass_include_dir


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


def _cutlass_include_dirs() -> list[str]:
    """CUTLASS's include/ and the folders that hold cuda/std/ (CUDA 13 keeps it
    under include/cccl/, which CUTLASS also names as cccl/cuda/std/...); [] when
    either is missing."""
    cutlass = cutlass_include_dir()
    if cutlass is None:
        return []
    roots = [os.path.join(os.environ[e], "include") for e in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(e)]
    roots.append("/usr/local/cuda/include")
    for base in map(Path, sys.path):
        roots += [str(p) for p in sorted((base / "nvidia").glob("*/include"))]
    for root in roots:
        dirs = [cutlass]
        if (Path(root) / "cuda" / "std" / "cstdint").is_file():
            dirs.append(root)
        if (Path(root) / "cccl" / "cuda" / "std" / "cstdint").is_file():
            dirs += [root, os.path.join(root, "cccl")]
        if len(dirs) > 1:
            return list(dict.fromkeys(dirs))
    return []


def gemm_headers_missing() -> tuple[str, str] | None:
    """(why GEMM kernels cannot be compiled here, what to do); None when
    CUTLASS's and libcu++'s headers were both found."""
    if cutlass_include_dir() is None:
        return "CUTLASS headers not found (nvidia-cutlass not installed)", "pip install nvidia-cutlass==4.2.0.0"
    if not _cutlass_include_dirs():
        return (
            "libcu++'s cuda/std headers not found (no CUDA toolkit include/ under CUDA_HOME or /usr/local/cuda)",
            "install the CUDA toolkit's headers or set CUDA_HOME",
        )
    return None


for _d in _library_dirs():
    _core.add_library_search_dir(_d)
for _d in _cutlass_include_dirs():
    _core.add_cutlass_include_dir(_d)
# Installed beside the extension (CMakeLists.txt): kernels compiled together
# compile in parallel in it; without it they compile here, one at a time.
_worker = os.path.join(os.path.dirname(_core.__file__), "fuseforge-nvrtc")
if os.access(_worker, os.X_OK):
    _core.set_compile_worker(_worker)
else:
    logging.getLogger("fuseforge").warning(
        "fuseforge: %s is missing (reinstall fuseforge): kernels compile one at a time", _worker
    )

core = _core

#: The compute capability kernels target where this machine has no GPU (H100).
CPU_CHECK_ARCH = 90


def target_arch() -> int:
    """The compute capability of this machine's first GPU; CPU_CHECK_ARCH without one."""
    import torch

    return core.device_arch(0) if torch.cuda.is_available() else CPU_CHECK_ARCH
