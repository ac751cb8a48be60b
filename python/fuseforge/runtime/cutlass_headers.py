"""Where CUTLASS's headers are: the include/ folder of the nvidia-cutlass wheel
(a pinned dependency). `fuseforge emit` copies `cutlass_include_dir`
verbatim into emitted files that carry GEMM kernels, so it uses only the
standard library and imports inside its body."""

from __future__ import annotations


def cutlass_include_dir() -> str | None:
    """CUTLASS's include/ folder from the nvidia-cutlass wheel, found without
    importing the wheel's Python package; None when it is not installed."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        return None
    include = Path(next(iter(spec.submodule_search_locations))) / "source" / "include"
    return str(include) if (include / "cutlass" / "cutlass.h").is_file() else None
