"""`fuseforge bench`: a benchmark suite report over many problem files.

Each problem is one `fuseforge run FILE --compile-times --json TMP` command in
a worker process (fuseforge.harness.worker: its own process group, killed
after `--timeout` seconds; a crash, hang or error ends only that worker and
the next problem starts a fresh one), so one problem cannot take the suite
down, while problems that run well share one process and pay for importing
torch and initializing CUDA once. The per-problem figures are those of
`fuseforge run` (correctness vs eager and fp64 over several seeds; eager,
inductor and fuseforge timed in one process with cold L2, CUDA events,
warm-up and median; see fuseforge.runtime.timing), plus cold and cached
compile times, a roofline estimate (fuseforge.harness.roofline) and the
wall seconds of each phase (`wall_s`, `phase_s`); with `--train`, each
row's `train` object (fuseforge.harness.train).

With `--jobs N` (N > 1, GPU only) compiling and timing are split: first up to
N problems at a time run `fuseforge run --compile-only`, each in a process of
its own, which measures the compile times (each with its own empty cache, so
cold is cold), keeps the kernels in the disk cache and compiles inductor
once, filling its caches (but for its Triton kernels' tuning: the worker
tunes them at their first call, alone); with `--train` it takes a first
training step of each too (fuseforge's and torch.compile's), filling the
same caches; then each problem is checked and timed alone on its GPU, so no
two timings share a GPU.

With `--gpus N` (default: every visible GPU) the problems are shared out over
N GPUs: the compile jobs go round the GPUs, and each GPU has one timing
worker (CUDA_VISIBLE_DEVICES set to that GPU) that takes the next problem
from a common queue, longest compile first (the compile phase's wall time
stands for a problem's whole cost), so the GPUs finish close together. Each
row records the GPU it ran on; the report is one table, as from one GPU.

The whole run uses a cache directory of its own (FUSEFORGE_CACHE_DIR, a new
temporary one), so what the plans decide from timings (cuDNN's times per
conv, which the conv scheduler weighs our kernels against) is timed in this
run, alone on the GPU, never read from a cache another process filled while
the GPU was busy (test runs in parallel, the compile jobs above).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import queue
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from rich.progress import Progress

from fuseforge.harness.cli import console, print_full_width
from fuseforge.harness.measure import temporary_cache_dir
from fuseforge.harness.problem import problem_name
from fuseforge.harness.report import check_plotting, merge_reports, render_markdown, render_table, summarize, write_plot
from fuseforge.harness.worker import Worker
from fuseforge.runtime.options import ENV_COMPILE_JOBS

#: Keys every problem's entry has in the JSON report (None where not measured).
PROBLEM_KEYS = (
    "correct",
    "max_err_vs_eager",
    "max_err_vs_fp64",
    "eager_ms",
    "inductor_ms",
    "fuseforge_ms",
    "speedup_vs_eager",
    "speedup_vs_inductor",
    "compile_s_cold",
    "compile_s_warm",
)


def find_problems(paths: Sequence[str]) -> list[Path]:
    """Problem files among `paths`: files as given, folders searched
    recursively for *.py (files starting with '_' skipped), sorted per folder.
    Raises FileNotFoundError for a missing path or when nothing is found and
    ValueError when two problems share a name (their JSON keys would clash)."""
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found += sorted(f for f in p.rglob("*.py") if not f.name.startswith("_"))
        elif p.is_file():
            found.append(p)
        else:
            raise FileNotFoundError(f"no problem file or folder at {p}")
    if not found:
        raise FileNotFoundError(f"no problem files under {', '.join(paths)}")
    names: dict[str, Path] = {}
    for f in found:
        if problem_name(f) in names and names[problem_name(f)].resolve() != f.resolve():
            raise ValueError(f"two problems named {problem_name(f)!r}: {names[problem_name(f)]} and {f}")
        names[problem_name(f)] = f
    return list(dict.fromkeys(names.values()))


def _tail(text: str, lines: int = 8) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def visible_gpus(count: int | None) -> list[str]:
    """The CUDA_VISIBLE_DEVICES names of the first `count` GPUs this process
    sees (None: every one); raises ValueError saying how many are visible
    when fewer are, or when count < 1."""
    n = torch.cuda.device_count()
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = [d.strip() for d in listed.split(",")][:n] if listed else [str(i) for i in range(n)]
    if count is None:
        return names
    if not 1 <= count <= len(names):
        raise ValueError(f"--gpus {count}: {len(names)} GPU{'' if len(names) == 1 else 's'} visible here")
    return names[:count]


def run_problem(
    path: Path,
    args: argparse.Namespace,
    phase: str = "--compile-times",
    worker: Worker | None = None,
    gpu: str | None = None,
    compile_jobs: int | None = None,
) -> dict[str, Any]:
    """One problem's row from `fuseforge run PATH <phase>` (phase:
    --compile-times, --compile-only, or "" for check and timing only) in
    `worker`, or in a fresh worker process of its own when none is given (on
    GPU `gpu`, a CUDA_VISIBLE_DEVICES name, and compiling `compile_jobs`
    kernels at once, where given), with the wall seconds it took in `wall_s`;
    on a crash or a timeout, a row with correct=False and the reason in
    `error`."""
    started = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="fuseforge-bench-") as tmp,
        contextlib.nullcontext(worker) if worker is not None else Worker(_worker_env(gpu, compile_jobs)) as runner,
    ):
        out = os.path.join(tmp, "row.json")
        argv = [
            "run",
            str(path),
            "--json",
            out,
            *([phase] if phase else []),
            "--against",
            args.against,
            "--seeds",
            str(args.seeds),
            "--precision",
            args.precision,
            "--eager-convs",
            args.eager_convs,
        ]
        if args.mode:
            argv += ["--mode", args.mode]
        if getattr(args, "train", False):
            argv.append("--train")
        result = runner.run(argv, args.timeout)
        row: dict[str, Any] = {}
        if os.path.exists(out):
            with open(out) as f:
                row = json.load(f)
        if result.returncode is None:
            timed_out = f"timed out after {args.timeout:g} s"
            if phase == "--compile-only" and row:  # compiled; the training steps' compile ran out of time
                return {**row, "train_precompile_error": timed_out, "wall_s": args.timeout}
            return {"correct": False, "error": timed_out, "wall_s": args.timeout}
        if result.returncode not in (0, 1) or not row:  # 1: ran, but not correct
            row["correct"] = False
            code = result.returncode
            how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
            said = [line for line in result.stderr.splitlines() if line.startswith("fuseforge run: ")]
            row["error"] = (
                said[-1][len("fuseforge run: ") :].removesuffix(" (--verbose shows the traceback)")
                if said
                else f"{how}: {_tail(result.stderr)}"
            )
        row["wall_s"] = time.perf_counter() - started
        return row


def _worker_env(gpu: str | None, compile_jobs: int | None = None) -> dict[str, str] | None:
    """The environment a worker process adds: the GPU it sees and, for one of
    several compile jobs at once, its share of the cores to compile kernels on."""
    env = {"CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else {}
    if compile_jobs is not None:
        env[ENV_COMPILE_JOBS] = str(compile_jobs)
    return env or None


def cmd_bench(args: argparse.Namespace) -> int:
    """Runs the suite (or merges reports with --merge); exit code 0 only when
    every problem is correct (with --train: its training step too)."""
    from fuseforge.runtime.precision import check_precision

    if args.plot:
        check_plotting()  # fail before the runs, not after
    if args.merge:
        if args.paths:
            raise ValueError("give either problem files or --merge, not both")
        return _finish(merge_reports(args.merge, replace=args.replace), args)
    if not args.paths:
        raise ValueError("no problem files given")
    check_precision(args.precision)
    problems = find_problems(args.paths)
    if not torch.cuda.is_available():
        console.print(
            "[yellow]fuseforge bench: no CUDA GPU here — each problem gets `fuseforge run`'s CPU check "
            "(NVRTC compile and the plan on the interpreter), with no timings[/yellow]"
        )
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__,
        "precision": args.precision,
        "mode": args.mode or "model default",
        "eager_convs": args.eager_convs,
        "against": args.against,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(
            [
                "fuseforge bench",
                *args.paths,
                "--against",
                args.against,
                "--precision",
                args.precision,
                *(["--mode", args.mode] if args.mode else []),
                *(["--eager-convs", args.eager_convs] if args.eager_convs != "default" else []),
                "--seeds",
                str(args.seeds),
                "--jobs",
                str(args.jobs),
                *(["--train"] if args.train else []),
            ]
        ),
        "problems": {},
    }
    # None: no GPU here, the CPU check runs in one worker.
    gpus: list[str | None] = [*visible_gpus(args.gpus)] if torch.cuda.is_available() else [None]
    if torch.cuda.is_available():
        report["gpus"] = len(gpus)
        report["command"] += f" --gpus {len(gpus)}"
    compiled: dict[Path, dict[str, Any]] = {}
    rows: dict[Path, dict[str, Any]] = {}
    lock = threading.Lock()

    def record(path: Path, row: dict[str, Any], gpu: str | None) -> None:
        row.pop("problem", None)
        row["file"] = str(path)
        if gpu is not None:
            row["gpu"] = gpu
        for key in PROBLEM_KEYS:
            row.setdefault(key, None)
        with lock:
            rows[path] = row
            # The suite's order, and written after every problem, so a suite cut short keeps what it measured.
            report["problems"] = {problem_name(p): rows[p] for p in problems if p in rows}
            if args.json:
                _write_json({**report, "summary": summarize(report["problems"])}, args.json)

    with contextlib.ExitStack() as stack:
        stack.enter_context(temporary_cache_dir("fuseforge-bench-"))  # inherited by the compile jobs and the workers
        progress = stack.enter_context(Progress(console=console, transient=True))
        if args.jobs > 1 and torch.cuda.is_available():
            task = progress.add_task(f"compiling, {args.jobs} at a time on {len(gpus)} GPU(s)", total=len(problems))
            share = max(1, (os.cpu_count() or 1) // args.jobs)  # the cores, shared out: compile s stays honest
            with ThreadPoolExecutor(args.jobs) as pool:
                jobs = pool.map(
                    lambda ip: run_problem(
                        ip[1], args, "--compile-only", gpu=gpus[ip[0] % len(gpus)], compile_jobs=share
                    ),
                    enumerate(problems),
                )
                for path, row in zip(problems, jobs):
                    compiled[path] = row
                    progress.advance(task)
        task = progress.add_task("bench", total=len(problems))
        todo: queue.Queue[Path] = queue.Queue()
        for path in sorted(problems, key=lambda p: -(compiled.get(p, {}).get("wall_s") or 0.0)):
            todo.put(path)

        def time_on(gpu: str | None) -> None:
            with Worker(_worker_env(gpu)) as worker:  # one process for every problem that runs well
                while True:
                    try:
                        path = todo.get_nowait()
                    except queue.Empty:
                        return
                    progress.update(task, description=problem_name(path))
                    first = compiled.get(path)
                    if first is not None and "error" in first:
                        row = first  # it did not compile: nothing to check or time
                    else:
                        row = run_problem(path, args, "" if first is not None else "--compile-times", worker)
                        if first is not None:
                            kept = ("compile_s_cold", "compile_s_warm", "train_precompile_s", "train_precompile_error")
                            row.update({k: first[k] for k in kept if k in first})
                            row["compile_phase_wall_s"] = first.get("wall_s")
                    record(path, row, gpu)
                    progress.advance(task)

        with ThreadPoolExecutor(len(gpus)) as pool:
            for done in [pool.submit(time_on, gpu) for gpu in gpus]:
                done.result()
    return _finish(report, args)


def _write_json(report: dict[str, Any], path: str) -> None:
    with open(path, "w") as f:
        json.dump(report, f, indent=2, default=str)


def _finish(report: dict[str, Any], args: argparse.Namespace) -> int:
    report["summary"] = summarize(report["problems"])
    print_full_width(render_table(report))
    if args.json:
        _write_json(report, args.json)
        console.print(f"wrote {args.json}")
    if args.md:
        with open(args.md, "w") as f:
            f.write(render_markdown(report))
        console.print(f"wrote {args.md}")
    if args.plot:
        write_plot(report, args.plot)
        console.print(f"wrote {args.plot}")
    from fuseforge.harness.train import train_ok

    trained = all(train_ok(r.get("train")) for r in report["problems"].values())  # bench --train
    return 0 if report["summary"]["correct"] == report["summary"]["problems"] and trained else 1
