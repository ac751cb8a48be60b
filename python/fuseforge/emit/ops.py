"""Library steps of a plan as Python source text, for `fuseforge emit`.

The text is library_calls.expression's, the form the executor compiles, except
for opaque nodes, whose captured argument text is rewritten here as source.
Operands arrive as source text (variable names or literals).
"""
from __future__ import annotations

import ast
import math
import re
from typing import Any, Sequence

from fuseforge.runtime import library_calls
from fuseforge.runtime.library_calls import Type


class EmitError(ValueError):
    """A plan that `fuseforge emit` cannot write out; the message says what."""


def literal(v: Any) -> str:
    """A Python number (or bool/None) as source text; inf and nan included."""
    if isinstance(v, float) and (math.isinf(v) or math.isnan(v)):
        return f"float({str(v)!r})"
    if v is None or isinstance(v, (bool, int, float)):
        return repr(v)
    raise EmitError(f"cannot write literal {v!r}")


def _opaque(attrs: dict, a: list[str]) -> str:
    """An opaque node: its captured argument text with `$i` replaced by the
    operands and devices by the emitted module's `dev`."""
    target = attrs["target"]
    parts = target.split(".")
    if len(parts) != 3 or not all(p.isidentifier() for p in parts):
        raise EmitError(f"bad opaque target {target!r}")

    class Rewrite(ast.NodeTransformer):
        def visit_Name(self, n: ast.Name) -> ast.AST:
            if n.id.startswith("__ff_t"):
                return ast.Name(a[int(n.id[6:])], ast.Load())
            if n.id in ("inf", "nan"):
                return ast.parse(f"float({n.id!r})", mode="eval").body
            raise EmitError(f"unexpected name {n.id!r} in opaque arguments of {target}")

        def visit_Call(self, n: ast.Call) -> ast.AST:
            f = n.func
            if isinstance(f, ast.Attribute) and f.attr == "device" and isinstance(f.value, ast.Name) \
                    and f.value.id == "torch":
                return ast.Name("dev", ast.Load())
            raise EmitError(f"unexpected call {ast.unparse(n)} in opaque arguments of {target}")

        def visit_Attribute(self, n: ast.Attribute) -> ast.AST:
            if isinstance(n.value, ast.Name) and n.value.id == "torch":
                return n  # torch.float32, torch.contiguous_format, ...
            raise EmitError(f"unexpected attribute {ast.unparse(n)} in opaque arguments of {target}")

    def rewrite(text: str) -> str:
        tree = ast.parse(re.sub(r"\$(\d+)", lambda m: f"__ff_t{m.group(1)}", text), mode="eval")
        return ast.unparse(Rewrite().visit(tree).body)

    args = rewrite(attrs.get("args", "[]"))
    kwargs = rewrite(attrs["kwargs"]) if attrs.get("kwargs") else "{}"
    return f"torch.ops.{target}(*{args}, **{kwargs})"


def step_expr(step: dict, a: Sequence[str], in_types: Sequence[Type | None]) -> str:
    """Source of an expression computing one library step: library_calls.expression
    (the executor's own calls), or for an opaque node its captured call. `a`:
    operand texts; `in_types`: their plan types (None for literals). Raises
    EmitError for an op with no torch form."""
    if step["op"] == "opaque":
        return _opaque(step["attrs"], list(a))
    try:
        return library_calls.expression(step, a, in_types)
    except library_calls.NoLibraryCall:
        raise EmitError(f"fuseforge emit: no Python form for IR op '{step['op']}' "
                        f"(step `{step.get('text', step['op'])}`)") from None
