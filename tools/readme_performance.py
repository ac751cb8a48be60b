"""README.md's performance block, generated from the suite reports.

    python tools/readme_performance.py            rewrite the block in README.md
    python tools/readme_performance.py --check    exit 1, naming the difference, if README.md is stale

Reads every benchmarks/results/<gpu>.json (the latest full-suite report of
`fuseforge bench` per GPU kind) and writes, between the lines
`<!-- performance:begin -->` and `<!-- performance:end -->`, one table row
per report (GPU, torch, correct problems, geomean speedups and fast_1 counts
against eager and torch.compile) and the command each came from. Only the
standard library: it runs anywhere, without torch or a GPU.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- performance:begin -->"
END = "<!-- performance:end -->"
#: The baselines as the README names them: report key -> column title.
BASELINES = (("eager", "eager"), ("inductor", "torch.compile"))


def _as_list(value: Any) -> list[str]:
    """A report's `command` or `date`: one string, or a list of them (a
    report merged from parts with `fuseforge bench --merge`)."""
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def _speedup(summary: dict[str, Any], ref: str) -> str:
    g = summary.get(f"geomean_speedup_vs_{ref}")
    return f"{g:.2f}×" if isinstance(g, (int, float)) else "—"


def _fast_1(summary: dict[str, Any], ref: str) -> str:
    fast, timed = summary.get(f"fast_1_vs_{ref}"), summary.get(f"timed_vs_{ref}")
    return f"{fast}/{timed}" if fast is not None and timed else "—"


def _link(path: Path, readme_dir: Path) -> str:
    return Path(os.path.relpath(path.resolve(), readme_dir.resolve())).as_posix()


def _precision(report: dict[str, Any]) -> str:
    """The policy, with what else sets the run apart from the default one."""
    text = str(report.get("precision", "?"))
    if report.get("eager_convs") == "ieee":
        text += ", eager convs IEEE"
    if report.get("mode", "model default") != "model default":
        text += f", {report['mode']} mode"
    return text


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(results: Path, readme_dir: Path = ROOT) -> str:
    """The block's lines (without the markers) for the reports in `results`,
    links written relative to `readme_dir`."""
    reports = sorted(results.glob("*.json"))
    if not reports:
        return f"No suite report in {_link(results, readme_dir)} yet.\n"
    header = ["report", "GPU", "torch", "precision", "correct"]
    for _, title in BASELINES:
        header += [f"geomean × {title}", f"fast_1 vs {title}"]
    header.append("date")
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    commands: dict[str, list[str]] = {}
    for path in reports:
        report = json.loads(path.read_text())
        summary = report.get("summary", {})
        name = path.stem
        shown = path.with_suffix(".md") if path.with_suffix(".md").exists() else path
        row = [
            f"[{name}]({_link(shown, readme_dir)})",
            _cell(str(report.get("device", "?"))),
            _cell(str(report.get("torch", "?"))),
            _cell(_precision(report)),
            f"{summary.get('correct', '?')}/{summary.get('problems', '?')}",
        ]
        for ref, _ in BASELINES:
            row += [_speedup(summary, ref), _fast_1(summary, ref)]
        dates = sorted(d[:10] for d in _as_list(report.get("date")))
        row.append(dates[-1] if dates else "—")
        lines.append("| " + " | ".join(row) + " |")
        command = " && ".join(_as_list(report.get("command"))) or "(not recorded)"
        commands.setdefault(command, []).append(name)
    lines.append("")
    for command, names in commands.items():
        lines.append(f"{', '.join(names)}: `{command}`")
    return "\n".join(lines) + "\n"


def replace_block(readme: str, block: str) -> str:
    """`readme` with the text between the markers replaced by `block`;
    raises ValueError if the markers are missing or out of order."""
    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < 0 or end < start:
        raise ValueError(f"README has no '{BEGIN}' ... '{END}' block")
    return readme[: start + len(BEGIN)] + "\n" + block + readme[end:]


def check(readme_path: Path, results: Path) -> list[str]:
    """The differences (a unified diff's lines) between README's block and
    what the reports give; empty when README is up to date."""
    readme = readme_path.read_text()
    wanted = replace_block(readme, render(results, readme_path.parent))
    return list(
        difflib.unified_diff(
            readme.splitlines(),
            wanted.splitlines(),
            f"{readme_path.name} (as it is)",
            f"{readme_path.name} (from {results.name}/*.json)",
            lineterm="",
        )
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 if README is stale")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    try:
        diff = check(args.readme, args.results)
    except (OSError, ValueError) as e:
        print(f"readme_performance: {e}", file=sys.stderr)
        return 2
    if args.check:
        if diff:
            print(
                f"readme_performance: {args.readme}'s performance block differs from {args.results}/*.json "
                "(run python tools/readme_performance.py):",
                file=sys.stderr,
            )
            print("\n".join(diff), file=sys.stderr)
            return 1
        return 0
    if diff:
        readme = args.readme.read_text()
        args.readme.write_text(replace_block(readme, render(args.results, args.readme.parent)))
        print(f"readme_performance: rewrote the performance block of {args.readme}")
    else:
        print(f"readme_performance: {args.readme} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
