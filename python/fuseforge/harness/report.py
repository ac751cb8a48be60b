"""The bench's report: summaries (geomeans, fast_1 counts), the terminal
table, the Markdown page, the speedup plot, and merging reports of parts of
a suite into one. A report is the JSON `fuseforge bench --json` writes."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from rich.table import Table

from fuseforge.harness.roofline import ROOFLINE_LEGEND, roofline_cells


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
    judged = [r for r in problems.values() if r.get("inductor_correct") is not None]
    if judged:
        summary["inductor_judged"] = len(judged)
        summary["inductor_correct"] = sum(bool(r["inductor_correct"]) for r in judged)
    if any("train" in r for r in problems.values()):  # bench --train
        from fuseforge.harness.train import train_summary

        summary.update(train_summary(problems))
    return summary


def _f(row: dict, key: str, fmt: str) -> str:
    v = row.get(key)
    return format(v, fmt) if isinstance(v, (int, float)) and not isinstance(v, bool) else "—"


#: The report's columns, for the terminal table and the Markdown report alike.
COLUMNS = (
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
)


def _verdict(row: dict[str, Any]) -> str:
    return "yes" if row.get("correct") else ("NO" if "error" not in row else "FAILED")


def _cells(name: str, r: dict[str, Any]) -> list[str]:
    """One problem's cells, in COLUMNS' order."""
    return [
        name,
        r.get("mode", "—"),
        _verdict(r),
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
    ]


def _title(report: dict[str, Any]) -> str:
    return (
        f"fuseforge bench — {report['device']}"
        + (f" ×{report['gpus']}" if report.get("gpus", 1) > 1 else "")
        + f", torch {report['torch']}, {report['precision']}, mode {report['mode']}"
        + (", eager convs IEEE" if report.get("eager_convs") == "ieee" else "")
    )


#: What the compile columns mean, and why a suite's figures exceed one problem's alone.
COMPILE_LEGEND = (
    "compile s / cached s: seconds of the first call with an empty / a filled kernel cache; bench measures "
    "them while --jobs problems compile at once, so they include waiting for the CPU "
    "(`fuseforge run FILE --compile-times` measures one problem alone)"
)


def _summary_line(summary: dict[str, Any]) -> str:
    """Correct count, geomean speedups over the correct problems and fast_1 counts."""
    parts = [f"{summary['correct']}/{summary['problems']} correct"]
    for ref in ("eager", "inductor"):
        if f"timed_vs_{ref}" in summary:
            g = summary[f"geomean_speedup_vs_{ref}"]
            fast = f"fast_1 {summary[f'fast_1_vs_{ref}']}/{summary[f'timed_vs_{ref}']}"
            parts.append(f"vs {ref}: geomean {g:.2f}× (correct ones), {fast}" if g else f"vs {ref}: no correct timing")
    return " · ".join(parts)


def _inductor_accuracy(report: dict[str, Any]) -> list[str]:
    """torch.compile judged by the same accuracy rule as fuseforge: how many
    problems it meets the rule on, and the verdict (its errors against eager
    and fp64, and eager's) on each one it does not: a speedup against it
    there compares with math the rule would not accept from fuseforge."""
    summary = report["summary"]
    if "inductor_judged" not in summary:
        return []
    lines = [
        f"torch.compile by the same accuracy rule: {summary['inductor_correct']}/{summary['inductor_judged']} correct"
    ]
    lines += [
        f"- {name}: torch.compile {r['inductor_verdict']}"
        for name, r in report["problems"].items()
        if r.get("inductor_correct") is False
    ]
    return lines


def _with_gpu(report: dict[str, Any]) -> bool:
    return any("gpu" in r for r in report["problems"].values()) and report.get("gpus", 1) > 1


def render_table(report: dict[str, Any]) -> Table:
    """The suite as one table; the caption holds geomeans and fast_1 counts."""
    table = Table(title=_title(report))
    gpu = _with_gpu(report)
    for col in (*COLUMNS, *(["gpu"] if gpu else [])):
        table.add_column(col, justify="left" if col in ("problem", "mode", "correct") else "right")
    for name, r in report["problems"].items():
        cells = _cells(name, r) + ([str(r.get("gpu", "—"))] if gpu else [])
        if cells[2] != "yes":
            cells[2] = f"[red]{cells[2]}[/red]"
        table.add_row(*cells)
    table.caption = "\n".join(
        (_summary_line(report["summary"]), *_inductor_accuracy(report), ROOFLINE_LEGEND, COMPILE_LEGEND)
    )
    if "train_steps" in report["summary"]:  # bench --train
        from fuseforge.harness.train import train_summary_line

        table.caption += "\n" + train_summary_line(report["summary"])
    for name, r in report["problems"].items():
        if "error" in r:
            table.caption += f"\n[red]{name}: {r['error']}[/red]"
    return table


def render_markdown(report: dict[str, Any]) -> str:
    """The report as a Markdown page: what ran (device, versions, command,
    date), the summary, one table row per problem and each failure's reason."""
    gpu = _with_gpu(report)
    commands = report["command"] if isinstance(report["command"], list) else [report["command"]]
    dates = report["date"] if isinstance(report["date"], list) else [report["date"]]
    lines = [
        f"# {_title(report)}",
        "",
        *[f"- `{c}`" for c in commands],
        f"- {', '.join(dates)}",
        f"- {_summary_line(report['summary'])}",
        "",
        "| " + " | ".join((*COLUMNS, *(["gpu"] if gpu else []))) + " |",
        "|" + "---|" * 3 + "---:|" * (len(COLUMNS) - 3 + gpu),
    ]
    for name, r in report["problems"].items():
        lines.append("| " + " | ".join(_cells(name, r) + ([str(r.get("gpu", "—"))] if gpu else [])) + " |")
    accuracy = _inductor_accuracy(report)
    if accuracy:
        lines += ["", *accuracy]
    lines += ["", ROOFLINE_LEGEND, "", COMPILE_LEGEND]
    errors = [f"- {name}: {r['error']}" for name, r in report["problems"].items() if "error" in r]
    if errors:
        lines += ["", "Failures:", *errors]
    if "train_steps" in report["summary"]:  # bench --train
        from fuseforge.harness.train import train_markdown

        lines += train_markdown(report)
    return "\n".join(lines) + "\n"


def check_plotting() -> Any:
    """matplotlib.pyplot (Agg backend); ValueError saying how to get it when missing."""
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
    plt = check_plotting()
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


def merge_reports(paths: Sequence[str], replace: bool = False) -> dict[str, Any]:
    """One report from several `--json` reports of the same device, torch,
    precision, mode and eager conv math (a suite run in parts, or a merged
    report and a part); raises ValueError if they differ or, unless
    `replace` (a later part's row of a problem replaces an earlier one's: a
    few problems measured again), name a problem twice. Each row keeps the
    command and date of the run that measured it (`run`); the report lists
    the runs that still measured a row of it."""
    merged: dict[str, Any] | None = None
    origin: dict[str, list[tuple[str, str]]] = {}  # problem -> the runs its row may come from
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
        if twice and not replace:
            raise ValueError(f"cannot merge {path}: {', '.join(sorted(twice))} already in an earlier part")
        commands, dates = (part[k] if isinstance(part[k], list) else [part[k]] for k in ("command", "date"))
        runs = list(zip(commands, dates))
        for name, row in part["problems"].items():
            if "run" not in row and len(runs) == 1:
                row["run"] = {"command": commands[0], "date": dates[0]}
            origin[name] = [(row["run"]["command"], row["run"]["date"])] if "run" in row else runs
        merged["problems"].update(part["problems"])
    if merged is None:
        raise ValueError("--merge needs at least one JSON report")
    kept: list[tuple[str, str]] = []
    for name in merged["problems"]:
        kept += [r for r in origin[name] if r not in kept]
    merged["command"], merged["date"] = [c for c, _ in kept], [d for _, d in kept]
    return merged
