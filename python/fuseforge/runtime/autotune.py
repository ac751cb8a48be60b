"""GEMM tile autotuning (FUSEFORGE_AUTOTUNE=1, read by runtime/options.py).

The cost model picks each GEMM kernel's tile; with autotuning on, a GEMM
kernel's plan lists its other candidate tiles, and its first run compiles
them, times each once
on the real operands and keeps the fastest. The choice is cached per kernel
code and launch sizes (Kernel.compile_key: the source less its name and
comments, which fixes dtype, layouts, epilogue and, but for a GEMM's sizes,
the shape; Kernel.constants: those sizes; the kernels of a network's
repeated blocks share it) and GPU architecture, in <cache dir>/autotune.json,
so later kernels of that code and later processes skip the timing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import statistics
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fuseforge._native import core


def label(name: str) -> str:
    """A kernel or candidate tile's name without the kernel's number in its
    plan (ff_gemm_mm_3xtf32_64x64_12 -> ff_gemm_mm_3xtf32_64x64): what a
    choice records, the same for every kernel of the same code."""
    return re.sub(r"_\d+$", "", name)


def key(source: str, arch: int) -> str:
    return f"sm{arch}-{hashlib.sha256(source.encode()).hexdigest()[:32]}"


def kernel_key(code: str, sizes: Sequence[int], arch: int) -> str:
    """The key of a kernel's choice: its code (Kernel.compile_key) and the
    sizes it is launched with (Kernel.constants)."""
    return key(f"{code}{list(sizes)}", arch)


#: The file of the tile choices; conv_probe keeps its measurements beside it.
CHOICES = "autotune.json"


def _path(file: str) -> Path | None:
    directory = core.cache_dir()
    return Path(directory) / file if directory else None


#: Each cache file as this process last read or wrote it, by path: its stat (a write
#: renames a new file into place: a new inode) and its records.
_read: dict[Path, tuple[tuple[int, int, int], dict[str, Any]]] = {}


def _stamp(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def load(file: str = CHOICES) -> dict[str, Any]:
    """A cache file's records (the tile choices: kernel key -> name of the
    chosen candidate); {} if none or unreadable. Parsed again only when the
    file changed: a compile asks once per kernel or conv, and parsing the
    whole file each time grew with the square of a network's size."""
    path = _path(file)
    if path is None:
        return {}
    try:
        st = path.stat()
    except OSError:
        return {}
    known = _read.get(path)
    if known is not None and known[0] == _stamp(st):
        return dict(known[1])
    try:
        records = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(records, dict):
        return {}
    _read[path] = (_stamp(st), records)
    return dict(records)


def store(k: str, value: Any, file: str = CHOICES) -> None:
    """Records one entry in a cache file (temporary file, then rename); never fails the run."""
    path = _path(file)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = load(file)
        data[k] = value
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".autotune-")
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
        _read[path] = (_stamp(path.stat()), data)
    except OSError:
        pass


def cuda_time(fn: Callable[[], object], reps: int = 5, warm_ms: float = 2.0, total_ms: float = 10.0) -> float:
    """Median milliseconds of `fn` (CUDA events) after warming up for at
    least `warm_ms`, over `reps` runs or as many more (up to 50) as take about
    `total_ms`. Short functions need both: timed over one warm-up and five
    runs, a 36 us cuDNN conv once measured slower than our kernel's modelled
    98 us, and its plan took that kernel, which runs 83 us."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    torch.cuda.synchronize()
    runs = 0
    start.record()
    while True:
        fn()
        runs += 1
        end.record()
        end.synchronize()
        if start.elapsed_time(end) >= warm_ms or runs >= 200:
            break
    each = start.elapsed_time(end) / runs
    times = []
    for _ in range(int(min(50, max(reps, total_ms / max(each, 1e-3))))):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def choose(
    k: str,
    names: Sequence[str],
    runs: Sequence[Callable[[], object]],
    timer: Callable[[Callable[[], object]], float] = cuda_time,
) -> int:
    """Index of the candidate to use: the cached choice for `k` if it names one
    of `names`, else the fastest under `timer` (then cached). `k` and `names`
    say what the candidates compute, not which kernel of a plan they are, so
    that kernels of the same code (the repeated blocks of a network) are timed
    once."""
    cached = load().get(k)
    if cached is not None and cached in names:
        return list(names).index(cached)
    times = [timer(fn) for fn in runs]
    best = min(range(len(runs)), key=times.__getitem__)
    store(k, names[best])
    return best
