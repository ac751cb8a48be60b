"""`fuseforge emit`: standalone ModelNew files (writer) whose library steps are
written as torch source (ops)."""
from __future__ import annotations

from fuseforge.emit.ops import EmitError
from fuseforge.emit.writer import cmd_emit, cuda_sources, emit_problem

__all__ = ["EmitError", "emit_problem", "cuda_sources", "cmd_emit"]
