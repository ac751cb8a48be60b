"""Timing the way results are judged: CUDA events around one call, L2 flushed
before every trial by writing a 256 MiB buffer, warm-up first, median of many."""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch

_FLUSH_BYTES = 256 << 20


def time_cuda(fn: Callable[[], Any], *, warmup: int = 3, trials: int = 20, max_seconds: float = 10.0) -> float:
    """Median milliseconds of `fn()` over `trials` cold-L2 runs (fewer if they
    would take longer than `max_seconds`)."""
    flush = torch.empty(_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times: list[float] = []
    start_wall = time.perf_counter()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(trials):
        flush.fill_(1)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
        if time.perf_counter() - start_wall > max_seconds and len(times) >= 5:
            break
    return statistics.median(times)
