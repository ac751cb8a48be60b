"""Standalone ModelNew files (writer) that run a plan's steps: kernels with
their launchers and host wrappers (cuda), the prepare and run sections as
torch code (forward), library steps as torch source (ops), the per-call
runtime with its CUDA graphs, copied into each file (dispatch). The
`fuseforge emit` command, which loads a problem file, is harness/emit.py."""

from __future__ import annotations

from fuseforge.emit.ops import EmitError
from fuseforge.emit.writer import check_source, emit_model

__all__ = ["EmitError", "check_source", "emit_model"]
