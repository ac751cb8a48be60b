"""Library steps of a plan as Python source text, for `fuseforge emit`.

Each function here writes, as an expression over torch alone, what
aten_ops.make_call's closure computes for the same step (tests compare the
two on every step of every benchmark problem). Operands arrive as source
text (variable names or literals); `in_types` gives their plan types.
"""
from __future__ import annotations

import ast
import math
import re
from typing import Any, Callable, Sequence

from fuseforge import aten_ops

Type = tuple  # (dtype name, shape, strides) as in plan["values"]


class EmitError(ValueError):
    """A plan that `fuseforge emit` cannot write out; the message says what."""


def dtype_text(name: str) -> str:
    """'f32' -> 'torch.float32'."""
    return str(aten_ops.DTYPES[name])


def literal(v: Any) -> str:
    """A Python number (or bool/None) as source text; inf and nan included."""
    if isinstance(v, float) and (math.isinf(v) or math.isnan(v)):
        return f"float({str(v)!r})"
    if v is None or isinstance(v, (bool, int, float)):
        return repr(v)
    raise EmitError(f"cannot write literal {v!r}")


def _dims(attrs: dict, rank: int) -> list[int]:
    dims = attrs.get("dims") or []
    return list(dims) if dims else list(range(rank))


def _keep(attrs: dict) -> bool:
    return bool(attrs.get("keepdim", False))


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
    """Source of an expression computing one library step (a tensor, or a
    tuple for an op with several results). `a`: operand texts; `in_types`:
    their plan types (None for literals). Raises EmitError for an op it does
    not know."""
    op, at = step["op"], step["attrs"]
    a = list(a)
    rt = step["result_types"][0]
    dt, shape = dtype_text(rt[0]), list(rt[1])
    in_dtype = dtype_text(in_types[0][0]) if in_types and in_types[0] is not None else None
    rank = len(in_types[0][1]) if in_types and in_types[0] is not None else 0
    keep = _keep(at)
    if op == "view":
        return f"{a[0]}.reshape({shape})"
    if op == "expand":
        return f"{a[0]}.expand({shape})"
    if op == "opaque":
        return _opaque(at, a)
    table: dict[str, Callable[[], str]] = {
        "mm": lambda: f"torch.mm({a[0]}, {a[1]})",
        "bmm": lambda: f"torch.bmm({a[0]}, {a[1]})",
        "addmm": lambda: f"torch.addmm({a[0]}, {a[1]}, {a[2]}, beta={at.get('beta', 1)!r}, alpha={at.get('alpha', 1)!r})",
        "sum": lambda: f"torch.sum({a[0]}, dim={_dims(at, rank)}, keepdim={keep}, dtype={dt})",
        "mean": lambda: f"torch.mean({a[0]}, dim={_dims(at, rank)}, keepdim={keep}, dtype={dt})",
        "amax": lambda: f"torch.amax({a[0]}, dim={_dims(at, rank)}, keepdim={keep})",
        "amin": lambda: f"torch.amin({a[0]}, dim={_dims(at, rank)}, keepdim={keep})",
        "any": lambda: f"torch.any({a[0]}, dim={_dims(at, rank)}, keepdim={keep})",
        "prod": lambda: "".join("torch.prod(" for _ in _dims(at, rank)) + a[0] + "".join(
            f", dim={d}, keepdim={keep}, dtype={dt})" for d in sorted(_dims(at, rank), reverse=True)),
        "var": lambda: f"torch.var({a[0]}, dim={_dims(at, rank)}, correction={at.get('correction', 1)!r}, keepdim={keep})",
        "argmax": lambda: f"torch.argmax({a[0]}, dim={at.get('dim')!r}, keepdim={keep})",
        "argmin": lambda: f"torch.argmin({a[0]}, dim={at.get('dim')!r}, keepdim={keep})",
        "softmax": lambda: f"torch.softmax({a[0]}, {at['dim']}, dtype={dt if dt != in_dtype else None})",
        "log_softmax": lambda: f"torch.log_softmax({a[0]}, {at['dim']}, dtype={dt if dt != in_dtype else None})",
        "layer_norm": lambda: (f"torch.nn.functional.layer_norm({a[0]}, {a[0]}.shape[{rank - at['ndims']}:], "
                               f"{a[1]}, {a[2]}, {at['eps']!r})"),
        "cumsum": lambda: f"torch.cumsum({a[0]}, {at['dim']}, dtype={dt})",
        "convolution": lambda: (
            f"torch.ops.aten.convolution.default({a[0]}, {a[1]}, {a[2] if len(a) > 2 else None}, {at['stride']}, "
            f"{at['padding']}, {at['dilation']}, {bool(at.get('transposed', False))}, "
            f"{at.get('output_padding', [0] * len(at['stride']))}, {at.get('groups', 1)})"),
        "permute": lambda: f"{a[0]}.permute({at['dims']})",
        "unsqueeze": lambda: f"{a[0]}.unsqueeze({at['dim']})",
        "squeeze": lambda: f"{a[0]}.squeeze({tuple(at['dims'])})" if "dims" in at else f"{a[0]}.squeeze()",
        "slice": lambda: (f"torch.ops.aten.slice.Tensor({a[0]}, {at['dim']}, {at.get('start', 0)}, {at.get('end')}, "
                          f"{at.get('step', 1)})"),
        "select": lambda: f"{a[0]}.select({at['dim']}, {at['index']})",
        "cat": lambda: f"torch.cat([{', '.join(a)}], {at['dim']})",
        "gelu": lambda: f"torch.nn.functional.gelu({a[0]}, approximate={at.get('approximate', 'none')!r})",
        "cast": lambda: f"{a[0]}.to({dt}, copy=True)",
        "copy": lambda: f"{a[0]}.to({dt}, copy=True)",
        "full": lambda: f"torch.full({shape}, {a[0]}, dtype={dt}, device=dev)",
    }
    if op in table:
        return table[op]()
    if op in _POINTWISE:
        args = a
        if op in ("maximum", "minimum"):  # need tensors: wrap Python numbers as 0-d, as aten_ops does
            args = [x if t is not None else f"torch.tensor({x})" for x, t in zip(a, in_types)]
        return f"{_POINTWISE[op]}({', '.join(args)}).to({dt})"
    raise EmitError(f"fuseforge emit: no Python form for IR op '{op}' (step `{step.get('text', op)}`)")


_POINTWISE = {op: ("torch.nn.functional.silu" if op == "silu" else f"torch.{fn.__name__}")
              for op, fn in aten_ops._POINTWISE.items()}
