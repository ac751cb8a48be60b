"""`fuseforge emit`: standalone ModelNew files (writer) that walk a plan's
steps: kernels with their launchers and host wrappers (cuda), the prepare and
run sections as torch code (forward), library steps as torch source (ops)."""

from __future__ import annotations

from fuseforge.emit.ops import EmitError
from fuseforge.emit.writer import cmd_emit, emit_problem

__all__ = ["EmitError", "emit_problem", "cmd_emit"]
