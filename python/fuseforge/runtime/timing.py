"""Timing the way results are judged: CUDA events around one call, L2 flushed
before every trial by writing a 256 MiB buffer, warm-up first, median of many.

Side-by-side figures are timed interleaved: each round times every candidate
once, in turn, so a drift during the run (clocks, memory state) falls on all
of them alike instead of on whichever would have been timed first.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch

_FLUSH_BYTES = 256 << 20


def time_cuda(
    fns: Mapping[str, Callable[[], Any]],
    *,
    warmup: int = 3,
    trials: int = 20,
    max_seconds: float = 30.0,
    resets: Mapping[str, Callable[[], None]] | None = None,
) -> dict[str, float]:
    """Median milliseconds of each `fns[name]()` over `trials` cold-L2 rounds
    (fewer if they would take longer than `max_seconds`, at least 5); every
    round times each function once, in the mapping's order. `resets[name]()`,
    where given, runs before each of its calls, outside the timed region (a
    training step's gradients cleared)."""
    resets = resets or {}
    flush = torch.empty(_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    for name, fn in fns.items():
        for _ in range(warmup):
            if name in resets:
                resets[name]()
            fn()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {name: [] for name in fns}
    start_wall = time.perf_counter()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i in range(trials):
        for name, fn in fns.items():
            if name in resets:
                resets[name]()
            flush.fill_(1)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end))
        if time.perf_counter() - start_wall > max_seconds and i + 1 >= 5:
            break
    return {name: statistics.median(t) for name, t in times.items()}
