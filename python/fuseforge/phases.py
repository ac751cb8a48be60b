"""Seconds of each compile phase, for `fuseforge run --compile-times`.

While `recording()` is active, the pipeline adds what each phase took:
capture (its export: torch.export; decompositions: run_decompositions;
lowering: the exported graph to IR text), the core's stages (parse, passes, fusion,
codegen, plan: core.Compiled.phase_seconds), NVRTC (compiling and loading the
plan's kernels) and GPU probes (what eager's convs do on the device). Outside
it, recording costs a check of an empty list.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator

_active: list[dict[str, float]] = []

#: The phases in pipeline order (how `fuseforge run --compile-times` lists them).
ORDER = (
    "capture: export",
    "capture: decompositions",
    "capture: lowering",
    "GPU probes",
    "parse",
    "passes",
    "fusion",
    "codegen",
    "plan",
    "NVRTC",
)


@contextlib.contextmanager
def recording() -> Iterator[dict[str, float]]:
    """A dict that fills with phase -> seconds (summed over repeats) while active."""
    seconds: dict[str, float] = {}
    _active.append(seconds)
    try:
        yield seconds
    finally:
        _active.remove(seconds)


def add(phase: str, seconds: float) -> None:
    for active in _active:
        active[phase] = active.get(phase, 0.0) + seconds


def add_all(phases: Iterable[tuple[str, float]]) -> None:
    for phase, seconds in phases:
        add(phase, seconds)


@contextlib.contextmanager
def timed(phase: str) -> Iterator[None]:
    """Adds the block's wall seconds to `phase` (when recording)."""
    if not _active:
        yield
        return
    start = time.perf_counter()
    try:
        yield
    finally:
        add(phase, time.perf_counter() - start)
