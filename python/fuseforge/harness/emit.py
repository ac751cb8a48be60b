"""`fuseforge emit PROBLEM.py -o OUT.py`: loads a problem file, builds its
Model (seeded 0) and inputs, and writes the standalone ModelNew file that
fuseforge.emit makes of them."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import torch

from fuseforge.emit import check_source, emit_model
from fuseforge.harness.problem import load_problem, problem_name

__all__ = ["emit_problem", "cmd_emit"]


def emit_problem(
    path: str | Path, modes: Sequence[str] = ("train", "eval"), arch: int | None = None, precision: str = "fp32"
) -> str:
    """The emitted file's text for a problem file (emit.writer's docstring
    says what it holds); `modes`, `arch` and `precision` as emit_model's."""
    mod = load_problem(path)  # first: it names a missing or broken file in its own words
    source = Path(path).read_text()
    check_source(source, str(path))  # before building a model the file cannot be emitted for
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs())
    return emit_model(
        model,
        list(mod.get_inputs()),
        source,
        name=problem_name(path),
        filename=str(path),
        modes=modes,
        arch=arch,
        precision=precision,
    )


def cmd_emit(args: argparse.Namespace) -> int:
    """Writes `args.output` for `args.problem`."""
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in ("train", "eval") for m in modes):
        raise ValueError(f"--modes takes train and/or eval, not {args.modes!r}")
    text = emit_problem(args.problem, modes, arch=args.arch, precision=args.precision)
    Path(args.output).write_text(text)
    print(f"wrote {args.output} ({len(text.splitlines())} lines)")
    return 0
