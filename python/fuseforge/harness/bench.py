"""`fuseforge bench`: a benchmark suite report over many problem files.

Each problem is one `fuseforge run FILE --compile-times --json TMP` command in
a worker process (fuseforge.harness.worker: its own process group, killed
after `--timeout` seconds; a crash, hang or error ends only that worker and
the next problem starts a fresh one), so one problem cannot take the suite
down, while problems that run well share one process and pay for importing
torch and initializing CUDA once. The per-problem figures are those of
`fuseforge run` (correctness vs eager and fp64 over several seeds; eager,
inductor and fuseforge timed in one process with cold L2, CUDA events,
warm-up and median; see fuseforge.harness.timing), plus cold and cached
compile times, a roofline estimate (fuseforge.harness.roofline) and the
wall seconds of each phase (`wall_s`, `phase_s`).

With `--jobs N` (N > 1, GPU only) compiling and timing are split: first up to
N problems at a time run `fuseforge run --compile-only`, each in a process of
its own, which measures the compile times (each with its own empty cache, so
cold is cold), keeps the kernels in the disk cache and compiles inductor
once, filling its caches (but for its Triton kernels' tuning: the worker
tunes them at their first call, alone); then each problem is checked and
timed alone, one after another in the shared worker, so no two timings
overlap.

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
import math
import os
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from rich.progress import Progress
from rich.table import Table

from fuseforge.harness.cli import console, print_full_width
from fuseforge.harness.measure import temporary_cache_dir
from fuseforge.harness.problem import problem_name
from fuseforge.harness.roofline import ROOFLINE_LEGEND, roofline_cells
from fuseforge.harness.worker import Worker

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


def run_problem(
    path: Path, args: argparse.Namespace, phase: str = "--compile-times", worker: Worker | None = None
) -> dict[str, Any]:
    """One problem's row from `fuseforge run PATH <phase>` (phase:
    --compile-times, --compile-only, or "" for check and timing only) in
    `worker`, or in a fresh worker process of its own when none is given, with
    the wall seconds it took in `wall_s`; on a crash or a timeout, a row with
    correct=False and the reason in `error`."""
    started = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="fuseforge-bench-") as tmp,
        contextlib.nullcontext(worker) if worker is not None else Worker() as runner,
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
        result = runner.run(argv, args.timeout)
        if result.returncode is None:
            return {"correct": False, "error": f"timed out after {args.timeout:g} s", "wall_s": args.timeout}
        row: dict[str, Any] = {}
        if os.path.exists(out):
            with open(out) as f:
                row = json.load(f)
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


def geomean(values: Sequence[float]) -> float | None:
    """Geometric mean of positive values; None for none."""
    vals = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, vals)) / len(vals)) if vals else None


def summarize(problems: dict[str, dict]) -> dict[str, Any]:
    """Geomean speedups and fast_1 counts (correct and faster than the baseline)."""
    summary: dict[str, Any] = {
        "problems": len(problems),
        "correct": sum(bool(r.get("correct")) for r in problems.values()),
    }
    for ref in ("eager", "inductor"):
        key = f"speedup_vs_{ref}"
        timed = [r for r in problems.values() if r.get(key)]
        if not timed:
            continue
        summary[f"geomean_{key}"] = geomean([r[key] for r in timed if r.get("correct")])
        summary[f"fast_1_vs_{ref}"] = sum(bool(r.get("correct")) and r[key] > 1.0 for r in timed)
        summary[f"timed_vs_{ref}"] = len(timed)
    return summary


def _f(row: dict, key: str, fmt: str) -> str:
    v = row.get(key)
    return format(v, fmt) if isinstance(v, (int, float)) and not isinstance(v, bool) else "—"


def render_table(report: dict[str, Any]) -> Table:
    """The suite as one table; the caption holds geomeans and fast_1 counts."""
    table = Table(
        title=f"fuseforge bench — {report['device']}, torch {report['torch']}, "
        f"{report['precision']}, mode {report['mode']}"
        + (", eager convs IEEE" if report.get("eager_convs") == "ieee" else "")
    )
    for col in (
        "problem",
        "mode",
        "correct",
        "err vs eager",
        "err vs fp64",
        "eager ms",
        "inductor ms",
        "fuseforge ms",
        "× eager",
        "× inductor",
        "compile s",
        "cached s",
        "TFLOP/s",
        "roofline",
    ):
        table.add_column(col, justify="left" if col in ("problem", "mode", "correct") else "right")
    for name, r in report["problems"].items():
        correct = "yes" if r.get("correct") else ("[red]NO[/red]" if "error" not in r else "[red]FAILED[/red]")
        table.add_row(
            name,
            r.get("mode", "—"),
            correct,
            _f(r, "max_err_vs_eager", ".1e"),
            _f(r, "max_err_vs_fp64", ".1e"),
            _f(r, "eager_ms", ".3f"),
            _f(r, "inductor_ms", ".3f"),
            _f(r, "fuseforge_ms", ".3f"),
            _f(r, "speedup_vs_eager", ".2f"),
            _f(r, "speedup_vs_inductor", ".2f"),
            _f(r, "compile_s_cold", ".2f"),
            _f(r, "compile_s_warm", ".2f"),
            *roofline_cells(r),
        )
    s = report["summary"]
    parts = [f"{s['correct']}/{s['problems']} correct"]
    for ref in ("eager", "inductor"):
        if f"timed_vs_{ref}" in s:
            g = s[f"geomean_speedup_vs_{ref}"]
            parts.append(
                f"vs {ref}: geomean {g:.2f}× (correct ones), fast_1 {s[f'fast_1_vs_{ref}']}/{s[f'timed_vs_{ref}']}"
                if g
                else f"vs {ref}: no correct timing"
            )
    table.caption = " · ".join(parts) + "\n" + ROOFLINE_LEGEND
    for name, r in report["problems"].items():
        if "error" in r:
            table.caption += f"\n[red]{name}: {r['error']}[/red]"
    return table


def _matplotlib() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ValueError(
            "--plot needs matplotlib, which is not installed (pip install matplotlib); run without --plot or install it"
        ) from e
    return plt


def write_plot(report: dict[str, Any], path: str) -> None:
    """Bar chart of speedup vs each baseline per problem (log scale), sorted
    by the speedup vs the first baseline; incorrect problems are hatched."""
    plt = _matplotlib()
    refs = [r for r in ("eager", "inductor") if any(p.get(f"speedup_vs_{r}") for p in report["problems"].values())]
    if not refs:
        raise ValueError("nothing to plot: no problem has a speedup")
    rows = sorted(report["problems"].items(), key=lambda kv: kv[1].get(f"speedup_vs_{refs[0]}") or 0.0)
    fig, ax = plt.subplots(figsize=(max(8.0, 0.42 * len(rows) + 2), 5.5))
    width = 0.8 / len(refs)
    for i, ref in enumerate(refs):
        xs = [j + (i - (len(refs) - 1) / 2) * width for j in range(len(rows))]
        ys = [r.get(f"speedup_vs_{ref}") or 0.0 for _, r in rows]
        bars = ax.bar(xs, ys, width, label=f"× {ref}")
        for bar, (_, r) in zip(bars, rows):
            if not r.get("correct"):
                bar.set_hatch("//")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(rows)), [n for n, _ in rows], rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("speedup (baseline ms / fuseforge ms)")
    ax.set_title(f"fuseforge speedup — {report['device']}, {report['precision']} (hatched: incorrect)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def merge_reports(paths: Sequence[str]) -> dict[str, Any]:
    """One report from several `--json` reports of the same device, torch,
    precision, mode and eager conv math (a suite run in parts); raises
    ValueError if they differ or name a problem twice."""
    merged: dict[str, Any] | None = None
    for path in paths:
        with open(path) as f:
            part = json.load(f)
        if merged is None:
            merged = {**part, "problems": {}, "command": [], "date": []}
        for key in ("device", "torch", "precision", "mode", "eager_convs"):
            # (reports from before --eager-convs ran with the default)
            if part.get(key, "default") != merged.get(key, "default"):
                raise ValueError(
                    f"cannot merge {path}: {key} is {part.get(key, 'default')!r}, not {merged.get(key, 'default')!r}"
                )
        twice = merged["problems"].keys() & part["problems"].keys()
        if twice:
            raise ValueError(f"cannot merge {path}: {', '.join(sorted(twice))} already in an earlier part")
        merged["problems"].update(part["problems"])
        merged["command"].append(part["command"])
        merged["date"].append(part["date"])
    if merged is None:
        raise ValueError("--merge needs at least one JSON report")
    return merged


def cmd_bench(args: argparse.Namespace) -> int:
    """Runs the suite (or merges reports with --merge); exit code 0 only when
    every problem is correct."""
    from fuseforge.runtime.precision import check_precision

    if args.plot:
        _matplotlib()  # fail before the runs, not after
    if args.merge:
        if args.paths:
            raise ValueError("give either problem files or --merge, not both")
        report = merge_reports(args.merge)
        return _finish(report, args)
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
            ]
        ),
        "problems": {},
    }
    compiled: dict[Path, dict[str, Any]] = {}
    with contextlib.ExitStack() as stack:
        stack.enter_context(temporary_cache_dir("fuseforge-bench-"))  # inherited by the compile jobs and the worker
        progress = stack.enter_context(Progress(console=console, transient=True))
        if args.jobs > 1 and torch.cuda.is_available():
            task = progress.add_task(f"compiling, {args.jobs} at a time", total=len(problems))
            with ThreadPoolExecutor(args.jobs) as pool:
                for path, row in zip(problems, pool.map(lambda p: run_problem(p, args, "--compile-only"), problems)):
                    compiled[path] = row
                    progress.advance(task)
        task = progress.add_task("bench", total=len(problems))
        worker = stack.enter_context(Worker())  # one process for every problem that runs well
        for path in problems:
            name = problem_name(path)
            progress.update(task, description=f"{name}")
            first = compiled.get(path)
            if first is not None and "error" in first:
                row = first  # it did not compile: nothing to check or time
            else:
                row = run_problem(path, args, "" if first is not None else "--compile-times", worker)
                if first is not None:
                    row.update({k: first[k] for k in ("compile_s_cold", "compile_s_warm") if k in first})
                    row["compile_phase_wall_s"] = first.get("wall_s")
            row.pop("problem", None)
            row["file"] = str(path)
            for key in PROBLEM_KEYS:
                row.setdefault(key, None)
            report["problems"][name] = row
            if args.json:  # after every problem, so a suite cut short keeps what it measured
                _write_json({**report, "summary": summarize(report["problems"])}, args.json)
            progress.advance(task)
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
    if args.plot:
        write_plot(report, args.plot)
        console.print(f"wrote {args.plot}")
    return 0 if report["summary"]["correct"] == report["summary"]["problems"] else 1
