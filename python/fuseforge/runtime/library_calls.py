"""IR ops that run as library calls, each written once as a torch expression.

`expression` gives the Python source of the torch call a plan step makes,
over operand texts. The executor compiles it once per step into a function
of the operand list (`make_call`); `fuseforge emit` writes the same text into
emitted files (fuseforge.emit.ops.step_expr), so both run the very same calls. Opaque
nodes (ATen ops the IR does not model) keep their captured argument text:
capture.opaque.compile_opaque_call decodes it here, emit.ops rewrites it as source.
A convolution carrying the fp32_precision its conv_precision pass decided
runs through `_ff_convolution`, which emitted files carry verbatim (hence the
prefix).
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Sequence

import torch

DTYPES = {
    "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64,
    "i64": torch.int64, "i32": torch.int32, "bool": torch.bool,
}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}

Call = Callable[[list[Any]], Any]
Type = tuple  # (dtype name, shape, strides), as in plan["values"]

#: Pointwise ops normally run inside generated kernels; these torch forms
#: serve the CPU path, GEMM fallbacks and `emit`.
POINTWISE: dict[str, str] = {
    **{op: f"torch.{op}" for op in (
        "neg", "abs", "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "sigmoid", "tanh", "relu", "sin", "cos",
        "reciprocal", "erf", "floor", "ceil", "trunc", "round", "sign", "logical_not", "isnan", "add", "sub", "mul",
        "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
        "remainder", "fmod", "where")},
    "silu": "torch.nn.functional.silu",
}


class NoLibraryCall(LookupError):
    """An IR op with no torch form here."""


# _ff_conv_fp32 and _ff_convolution are copied verbatim into emitted files:
# they use only contextlib and torch, and annotations that need no import.
@contextlib.contextmanager
def _ff_conv_fp32(value: str):
    """Within it, cuDNN convolutions compute f32 as `value` ("ieee" or "tf32");
    the user's setting comes back after (torch < 2.9: the allow_tf32 switch)."""
    cudnn = torch.backends.cudnn
    conv = getattr(cudnn, "conv", None)
    saved = conv.fp32_precision if conv is not None else cudnn.allow_tf32
    if conv is not None:
        conv.fp32_precision = value
    else:
        cudnn.allow_tf32 = value == "tf32"
    try:
        yield
    finally:
        if conv is not None:
            conv.fp32_precision = saved
        else:
            cudnn.allow_tf32 = saved


def _ff_convolution(fp32_precision: str, *args) -> torch.Tensor:
    """aten.convolution with cuDNN's f32 math as the conv's fp32_precision says."""
    with _ff_conv_fp32(fp32_precision):
        return torch.ops.aten.convolution.default(*args)


def _convolution(at: dict, a: list[str]) -> str:
    args = (f"{a[0]}, {a[1]}, {a[2] if len(a) > 2 else None}, {at['stride']}, {at['padding']}, {at['dilation']}, "
            f"{bool(at.get('transposed', False))}, {at.get('output_padding', [0] * len(at['stride']))}, "
            f"{at.get('groups', 1)}")
    if "fp32_precision" in at:
        return f"_ff_convolution({at['fp32_precision']!r}, {args})"
    return f"torch.ops.aten.convolution.default({args})"


def dtype_text(name: str) -> str:
    """'f32' -> 'torch.float32'."""
    return str(DTYPES[name])


def expression(step: dict, a: Sequence[str], in_types: Sequence[Type | None]) -> str:
    """Source of a torch expression computing one step (a tensor, or a tuple
    for an op with several results); `dev` names the device. `a`: operand
    texts; `in_types`: their plan types (None for literals). Raises
    NoLibraryCall for an op it does not know (opaque ones included)."""
    op, at = step["op"], step["attrs"]
    a = list(a)
    rt = step["result_types"][0]
    dt, shape = dtype_text(rt[0]), list(rt[1])
    first = in_types[0] if in_types else None
    in_dtype = dtype_text(first[0]) if first is not None else None
    rank = len(first[1]) if first is not None else 0
    keep = bool(at.get("keepdim", False))
    dims = list(at.get("dims") or []) or list(range(rank))  # reductions: none listed means all
    table: dict[str, Callable[[], str]] = {
        "view": lambda: f"{a[0]}.reshape({shape})",  # a view when strides allow, else a copy (the IR's view rule)
        "expand": lambda: f"{a[0]}.expand({shape})",
        "mm": lambda: f"torch.mm({a[0]}, {a[1]})",
        "bmm": lambda: f"torch.bmm({a[0]}, {a[1]})",
        "addmm": lambda: f"torch.addmm({a[0]}, {a[1]}, {a[2]}, beta={at.get('beta', 1)!r}, alpha={at.get('alpha', 1)!r})",
        "sum": lambda: f"torch.sum({a[0]}, dim={dims}, keepdim={keep}, dtype={dt})",
        "mean": lambda: f"torch.mean({a[0]}, dim={dims}, keepdim={keep}, dtype={dt})",
        "amax": lambda: f"torch.amax({a[0]}, dim={dims}, keepdim={keep})",
        "amin": lambda: f"torch.amin({a[0]}, dim={dims}, keepdim={keep})",
        "any": lambda: f"torch.any({a[0]}, dim={dims}, keepdim={keep})",
        # torch.prod takes one dim: innermost last, so earlier dims keep their index.
        "prod": lambda: "".join("torch.prod(" for _ in dims) + a[0] + "".join(
            f", dim={d}, keepdim={keep}, dtype={dt})" for d in sorted(dims, reverse=True)),
        "var": lambda: f"torch.var({a[0]}, dim={dims}, correction={at.get('correction', 1)!r}, keepdim={keep})",
        "argmax": lambda: f"torch.argmax({a[0]}, dim={at.get('dim')!r}, keepdim={keep})",
        "argmin": lambda: f"torch.argmin({a[0]}, dim={at.get('dim')!r}, keepdim={keep})",
        "softmax": lambda: f"torch.softmax({a[0]}, {at['dim']}, dtype={dt if dt != in_dtype else None})",
        "log_softmax": lambda: f"torch.log_softmax({a[0]}, {at['dim']}, dtype={dt if dt != in_dtype else None})",
        "layer_norm": lambda: (f"torch.nn.functional.layer_norm({a[0]}, {a[0]}.shape[{rank - at['ndims']}:], "
                               f"{a[1]}, {a[2]}, {at['eps']!r})"),
        "cumsum": lambda: f"torch.cumsum({a[0]}, {at['dim']}, dtype={dt})",
        "convolution": lambda: _convolution(at, a),
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
    if op in POINTWISE:
        args = a
        if op in ("maximum", "minimum"):  # take tensors only: numbers (literals, scalar inputs) become 0-d ones
            args = [x if t is not None and len(t[1]) else f"torch.as_tensor({x})" for x, t in zip(a, in_types)]
        return f"{POINTWISE[op]}({', '.join(args)}).to({dt})"
    raise NoLibraryCall(f"no library call for IR op '{op}'")


def make_call(step: dict, values: dict[str, Type], device: torch.device) -> Call:
    """The library call of one plan step (or a kernel's node) as a function of
    its operand list; `values` holds the plan's value types."""
    at = step["attrs"]
    if step["op"] == "opaque":
        from fuseforge.capture import compile_opaque_call
        return compile_opaque_call(at["target"], at.get("args", "[]"), at.get("kwargs"), device)
    operands = step["operands"]
    text = expression(step, [f"a[{i}]" for i in range(len(operands))],
                      [values[v] if kind == "value" else None for kind, v in operands])
    namespace = {"torch": torch, "dev": device, "_ff_convolution": _ff_convolution}
    return eval(f"lambda a: {text}", namespace)  # noqa: S307 - our own generated text
