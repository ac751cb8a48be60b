"""The op registry seen from Python: the facts the bindings give, the torch
expression of every op (the core's library-call text) against the CPU
reference interpreter, and each op's result-dtype rule against PyTorch's own
type promotion."""

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fuseforge._native import core
from fuseforge.dtypes import IR_NAME, TORCH

OPS = {name: core.op_info(name) for name in core.op_names()}
#: ops the interpreter has no reference semantics for (checked against torch below)
NOT_INTERPRETED = {"opaque"}


def test_op_facts_come_from_the_table():
    assert len(OPS) == len(core.op_names())
    assert {i.kind for i in OPS.values()} <= {
        "pointwise",
        "reduction",
        "window",
        "scan",
        "matmul",
        "conv",
        "layout",
        "opaque",
    }
    assert OPS["eq"].result_dtype == "compare" and OPS["logical_not"].result_dtype == "logical"
    assert OPS["where"].num_operands == 3 and not OPS["where"].promotes_operand(0)
    assert OPS["mul"].aten == ["mul.Tensor", "mul.Scalar"]
    for name, info in OPS.items():
        for spec in info.aten:  # every 1:1 mapping names an ATen overload with the op's arity
            packet, overload = spec.split(".")
            schema = getattr(getattr(torch.ops.aten, packet), overload)._schema
            assert len([a for a in schema.arguments if not a.kwarg_only]) == info.num_operands, (name, spec)
    with pytest.raises(ValueError, match="unknown IR op 'fancy'"):
        core.op_info("fancy")


def test_one_dtype_table():
    assert TORCH == {
        "f32": torch.float32,
        "f16": torch.float16,
        "bf16": torch.bfloat16,
        "f64": torch.float64,
        "i64": torch.int64,
        "i32": torch.int32,
        "bool": torch.bool,
    }
    assert all(IR_NAME[t] == n for n, t in TORCH.items())
    assert {d.name: d.size for d in core.dtype_table()} == {n: t.itemsize for n, t in TORCH.items()}


# ---------------------------------------------------------------------------
# torch expressions against the interpreter, one small graph per op


def _graph(inputs: dict[str, str], node: str) -> str:
    head = ", ".join(f"%{n}: {t}" for n, t in inputs.items())
    return f"graph @g({head}) {{\n  %0 = {node}\n  return %0\n}}\n"


def _dtype_rank(t: str) -> tuple[str, int]:
    """'f32[3,5]' -> ('f32', 2)."""
    dt, dims = t.rstrip("]").split("[")
    return dt, len(dims.split(",")) if dims else 0


def _pointwise_cases():
    """Every pointwise op whose result follows its operands (the others are
    below), over f32 and i64 tensors, a 0-d tensor and a literal; the result
    dtype by the op's rule."""
    f32, i64, b = "f32[3,5]", "i64[3,5]", "bool[3,5]"
    for name, info in OPS.items():
        if info.kind != "pointwise" or info.result_dtype == "declared" or name == "gelu":
            continue
        n = info.num_operands
        if info.result_dtype == "logical":
            operand_types = [[b] * n]
        elif name == "where":
            operand_types = [[b, f32, f32], [b, i64, "i64[]"]]
        elif n == 1:
            operand_types = [[f32], [i64]]
        else:
            operand_types = [[f32, f32], [i64, i64], [f32, "f32[]"], [i64, "f64[]"]]
        for types in operand_types:
            names = [f"x{i}" for i in range(n)]
            rd = core.result_dtype(name, [_dtype_rank(t) for t in types])
            args = ", ".join(f"%{x}" for x in names)
            yield f"{name}:{'/'.join(types)}", _graph(dict(zip(names, types)), f"{name}({args}) : {rd}[3,5]")
        if n == 2 and info.result_dtype != "logical":  # a literal operand (a Python number at run time)
            rd = core.result_dtype(name, [("f32", 2), "float"])
            yield f"{name}:literal", _graph({"x0": f32}, f"{name}(%x0, 0.75) : {rd}[3,5]")


def _pool_cases():
    """ATen's window arithmetic: padding, ceil_mode's last window, dilation,
    the divisor at padded edges with and without count_include_pad, an
    override; 1-, 2- and 3-d windows (the interpreter against ATen's ops)."""
    x2, x1, x3 = {"x": "f32[2,3,7,9]"}, {"x": "f32[2,3,11]"}, {"x": "f32[1,2,5,6,7]"}
    return (
        (
            "max_pool",
            _graph(
                x2,
                "max_pool(%x) {ceil_mode=false, dilation=[1, 1], kernel=[2, 2], padding=[0, 0], "
                "stride=[2, 2]} : f32[2,3,3,4]",
            ),
        ),
        (
            "max_pool:padded_ceil_dilated",
            _graph(
                x2,
                "max_pool(%x) {ceil_mode=true, dilation=[2, 1], kernel=[3, 3], "
                "padding=[1, 1], stride=[2, 2]} : f32[2,3,3,5]",
            ),
        ),
        (
            "max_pool:1d",
            _graph(x1, "max_pool(%x) {ceil_mode=true, dilation=[1], kernel=[3], padding=[1], stride=[2]} : f32[2,3,6]"),
        ),
        (
            "max_pool:3d",
            _graph(
                x3,
                "max_pool(%x) {ceil_mode=false, dilation=[1, 1, 1], kernel=[2, 3, 2], "
                "padding=[1, 0, 1], stride=[2, 2, 2]} : f32[1,2,3,2,4]",
            ),
        ),
        (
            "avg_pool",
            _graph(
                x2,
                "avg_pool(%x) {ceil_mode=false, count_include_pad=true, kernel=[2, 2], "
                "padding=[0, 0], stride=[2, 2]} : f32[2,3,3,4]",
            ),
        ),
        (
            "avg_pool:padded_included",
            _graph(
                x2,
                "avg_pool(%x) {ceil_mode=true, count_include_pad=true, "
                "kernel=[3, 2], padding=[1, 1], stride=[2, 2]} : f32[2,3,4,5]",
            ),
        ),
        (
            "avg_pool:padded_excluded",
            _graph(
                x2,
                "avg_pool(%x) {ceil_mode=true, count_include_pad=false, "
                "kernel=[3, 2], padding=[1, 1], stride=[2, 2]} : f32[2,3,4,5]",
            ),
        ),
        (
            "avg_pool:divisor",
            _graph(
                x2,
                "avg_pool(%x) {ceil_mode=false, count_include_pad=true, divisor_override=5, "
                "kernel=[3, 3], padding=[1, 1], stride=[1, 1]} : f32[2,3,7,9]",
            ),
        ),
        (
            "avg_pool:1d",
            _graph(
                x1,
                "avg_pool(%x) {ceil_mode=false, count_include_pad=false, kernel=[4], "
                "padding=[2], stride=[3]} : f32[2,3,4]",
            ),
        ),
        (
            "avg_pool:3d",
            _graph(
                x3,
                "avg_pool(%x) {ceil_mode=true, count_include_pad=false, kernel=[2, 2, 3], "
                "padding=[1, 0, 1], stride=[2, 2, 2]} : f32[1,2,3,3,4]",
            ),
        ),
    )


def _other_cases():
    x, xb = {"x": "f32[3,4]"}, {"x": "bool[3,4]"}
    yield from (
        ("gelu", _graph(x, 'gelu(%x) {approximate="none"} : f32[3,4]')),
        ("gelu:tanh", _graph(x, 'gelu(%x) {approximate="tanh"} : f32[3,4]')),
        ("cast", _graph(x, "cast(%x) : i32[3,4]")),
        ("copy", _graph(x, "copy(%x) : f32[3,4]")),
        ("full", _graph(x, "full(1.5) : f64[2,3]")),
        ("full:value", _graph({"s": "f32[]"}, "full(%s) : f32[2,3]")),
        ("sum", _graph(x, "sum(%x) {dims=[1], keepdim=false} : f64[3]")),
        ("sum:all", _graph(x, "sum(%x) {dims=[], keepdim=false} : f32[]")),
        ("mean", _graph(x, "mean(%x) {dims=[0], keepdim=true} : f32[1,4]")),
        ("amax", _graph(x, "amax(%x) {dims=[1], keepdim=false} : f32[3]")),
        ("amin", _graph(x, "amin(%x) {dims=[0, 1], keepdim=false} : f32[]")),
        ("prod", _graph(x, "prod(%x) {dims=[0, 1], keepdim=true} : f32[1,1]")),
        ("var", _graph(x, "var(%x) {correction=1, dims=[1], keepdim=false} : f32[3]")),
        ("any", _graph(xb, "any(%x) {dims=[1], keepdim=false} : bool[3]")),
        ("argmax", _graph(x, "argmax(%x) {dim=1, keepdim=false} : i64[3]")),
        ("argmin", _graph(x, "argmin(%x) {keepdim=false} : i64[]")),
        ("softmax", _graph(x, "softmax(%x) {dim=1} : f32[3,4]")),
        ("softmax:f16", _graph({"x": "f16[3,4]"}, "softmax(%x) {dim=0} : f32[3,4]")),
        ("log_softmax", _graph(x, "log_softmax(%x) {dim=1} : f32[3,4]")),
        ("logsumexp", _graph(x, "logsumexp(%x) {dims=[1], keepdim=true} : f32[3,1]")),
        (
            "layer_norm",
            _graph(
                {"x": "f32[3,4]", "w": "f32[4]", "b": "f32[4]"},
                "layer_norm(%x, %w, %b) {eps=1e-05, ndims=1} : f32[3,4]",
            ),
        ),
        ("cumsum", _graph(x, "cumsum(%x) {dim=1} : f64[3,4]")),
        ("cumsum:reverse", _graph(x, "cumsum(%x) {dim=0, reverse=true} : f32[3,4]")),
        ("cumprod", _graph(x, "cumprod(%x) {dim=1} : f32[3,4]")),
        ("flip", _graph(x, "flip(%x) {dims=[0, 1]} : f32[3,4]")),
        ("flip:last", _graph(x, "flip(%x) {dims=[-1]} : f32[3,4]")),
        ("cumprod:reverse", _graph(x, "cumprod(%x) {dim=-1, reverse=true} : f64[3,4]")),
        *_pool_cases(),
        ("mm", _graph({"a": "f32[3,4]", "b": "f32[4,5]"}, "mm(%a, %b) : f32[3,5]")),
        ("bmm", _graph({"a": "f32[2,3,4]", "b": "f32[2,4,5]"}, "bmm(%a, %b) : f32[2,3,5]")),
        (
            "addmm",
            _graph(
                {"c": "f32[5]", "a": "f32[3,4]", "b": "f32[4,5]"}, "addmm(%c, %a, %b) {alpha=0.5, beta=2.0} : f32[3,5]"
            ),
        ),
        (
            "convolution",
            _graph(
                {"x": "f64[2,4,7,8]", "w": "f64[6,2,3,2]", "b": "f64[6]"},
                "convolution(%x, %w, %b) {dilation=[2, 1], groups=2, output_padding=[0, 0], "
                "padding=[1, 2], stride=[1, 2], transposed=false} : f64[2,6,5,6]",
            ),
        ),
        (
            "convolution:1d",
            _graph(
                {"x": "f64[2,3,9]", "w": "f64[4,3,3]"},
                "convolution(%x, %w) {dilation=[1], groups=1, output_padding=[0], padding=[0], "
                "stride=[2], transposed=false} : f64[2,4,4]",
            ),
        ),
        (
            "convolution:transposed",
            _graph(
                {"x": "f64[2,4,5,5]", "w": "f64[4,3,3,3]", "b": "f64[6]"},
                "convolution(%x, %w, %b) {dilation=[1, 1], groups=2, output_padding=[1, 0], "
                "padding=[1, 1], stride=[2, 2], transposed=true} : f64[2,6,10,9]",
            ),
        ),
        ("view", _graph(x, "view(%x) : f32[2,6]")),
        ("permute", _graph(x, "permute(%x) {dims=[1, 0]} : f32[4,3]{1,4}")),
        ("expand", _graph({"x": "f32[1,4]"}, "expand(%x) : f32[3,4]{0,1}")),
        ("unsqueeze", _graph(x, "unsqueeze(%x) {dim=1} : f32[3,1,4]")),
        ("squeeze", _graph({"x": "f32[3,1,4]"}, "squeeze(%x) {dims=[1]} : f32[3,4]")),
        ("slice", _graph(x, "slice(%x) {dim=1, end=4, start=1, step=2} : f32[3,2]{4,2}")),
        ("select", _graph(x, "select(%x) {dim=1, index=2} : f32[3]{4}")),
        ("cat", _graph({"x": "f32[3,4]", "y": "f32[2,4]"}, "cat(%x, %y) {dim=0} : f32[5,4]")),
    )


CASES = dict(itertools.chain(_pointwise_cases(), _other_cases()))


def test_every_interpretable_op_has_a_case():
    covered = {case.split(":")[0] for case in CASES}
    assert covered == set(OPS) - NOT_INTERPRETED


def _inputs(text: str, seed: int) -> list[torch.Tensor]:
    """Random inputs of the graph's types: floats in [-2, 2), ints in [1, 8)
    (no division by zero), bools 50/50."""
    g = torch.Generator().manual_seed(seed)
    header = text.split("\n", 1)[0]
    out = []
    for decl in header[header.index("(") + 1 : header.rindex(")")].split(", "):
        dt, dims = decl.split(": ")[1].split("[")
        shape = [int(d) for d in dims.rstrip("]").split(",") if d]
        if dt == "bool":
            out.append(torch.rand(shape, generator=g) > 0.5)
        elif dt.startswith("i"):
            out.append(torch.randint(1, 8, shape, generator=g, dtype=TORCH[dt]))
        else:
            out.append((torch.rand(shape, generator=g, dtype=torch.float64) * 4 - 2).to(TORCH[dt]))
    return out


def _literal_texts(text: str) -> list[str]:
    """Operand texts of the graph's node: a[i] for values, the literal itself."""
    node = text.split("\n")[1]
    operands = node[node.index("(") + 1 : node.index(")")].split(", ")
    k, texts = 0, []
    for o in operands:
        if o.startswith("%"):
            texts.append(f"a[{k}]")
            k += 1
        elif o:
            texts.append(o)
    return texts


@pytest.mark.parametrize("case", list(CASES))
def test_torch_expression_matches_the_interpreter(case):
    text = CASES[case]
    inputs = _inputs(text, seed=len(case))
    want = core.interpret(text, [np.ascontiguousarray(x.double().numpy()) for x in inputs])[0]
    expr = core.torch_expr(text, -1, _literal_texts(text))
    try:
        got = eval(expr, {"torch": torch, "dev": torch.device("cpu"), "a": inputs})  # noqa: S307 - the core's text
    except (NotImplementedError, RuntimeError) as e:
        if not any(x.dtype.is_floating_point for x in inputs):
            pytest.skip(f"torch has no integer kernel: {e}")  # capture casts such operands to float first
        raise
    declared = text.split("\n")[1].rsplit(" : ", 1)[1]
    assert got.dtype == TORCH[declared[: declared.index("[")]], expr
    np.testing.assert_allclose(got.double().numpy(), want, rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=expr)


def test_torch_expression_of_opaque_ops():
    y = torch.randn(3, 4)
    text = (
        'graph @g(%x: f32[3,4]) {\n  %0, %1 = opaque(%x) {args="[$0, 1, True]", target="aten.max.dim"}'
        " : f32[3,1], i64[3,1]\n  return %0, %1\n}\n"
    )
    got = eval(core.torch_expr(text, 0, ["y"]), {"torch": torch, "dev": torch.device("cpu"), "y": y})
    for g, e in zip(got, torch.max(y, 1, keepdim=True)):
        torch.testing.assert_close(g, e)


def test_maximum_and_minimum_take_numbers_as_tensors():
    """torch.maximum/minimum need tensors: a literal or a scalar input (a
    Python number at run time) is wrapped as a 0-d tensor."""
    text = "graph @g(%x: f32[3], %s: f32[] scalar) {\n  %0 = minimum(%s, %x) : f32[3]\n  return %0\n}\n"
    got = eval(core.torch_expr(text, 0, ["s", "x"]), {"torch": torch, "s": 0.25, "x": torch.tensor([0.0, 1.0, -2.0])})
    torch.testing.assert_close(got, torch.tensor([0.0, 0.25, -2.0]))
    text = "graph @g(%x: f32[3]) {\n  %0 = maximum(%x, 0.5) : f32[3]\n  return %0\n}\n"
    assert core.torch_expr(text, 0, ["x", "0.5"]) == "torch.maximum(x, torch.as_tensor(0.5)).to(torch.float32)"


def test_bad_requests_fail_clearly():
    text = _graph({"x": "f32[3]"}, "neg(%x) : f32[3]")
    with pytest.raises(ValueError, match="operand texts"):
        core.torch_expr(text, 0, [])
    with pytest.raises(ValueError, match="node 3 of a graph of 1 nodes"):
        core.torch_expr(text, 3, ["x"])
    with pytest.raises(ValueError, match="unknown IR dtype 'f8'"):
        core.result_dtype("add", [("f8", 1)])


# ---------------------------------------------------------------------------
# result-dtype rules against PyTorch's promotion

_DTYPES = ["bool", "i32", "i64", "f16", "bf16", "f32", "f64"]
_NUMBERS = {"bool": True, "int": 3, "float": 0.5}


def _torch_fn(name: str):
    """The torch function of IR op `name` (copy, round_tf32: clone, a fresh
    tensor of the same dtype)."""
    return torch.clone if name in ("copy", "round_tf32") else getattr(torch, name, None) or getattr(F, name)


def _operand(spec):
    """(torch argument, core operand) for ('f32', rank) or a number kind."""
    if isinstance(spec, str):
        return _NUMBERS[spec], spec
    dt, rank = spec
    return torch.ones([2] * rank, dtype=TORCH[dt]), (dt, rank)


def _grid(n: int):
    tensors = [(d, r) for d in _DTYPES for r in (1, 0)]
    if n == 1:
        return [[t] for t in tensors]
    if n == 2:
        return [[a, b] for a in tensors for b in tensors + list(_NUMBERS)]
    return [[("bool", 1), a, b] for a in tensors for b in tensors + list(_NUMBERS)]


@pytest.mark.parametrize("name", [n for n, i in OPS.items() if i.kind == "pointwise" and i.result_dtype != "declared"])
def test_result_dtype_rule_matches_torch(name):
    """For every dtype combination torch accepts (tensors of rank 1 and 0,
    Python numbers), the rule gives torch's result dtype."""
    fn, checked = _torch_fn(name), 0
    for specs in _grid(OPS[name].num_operands):
        args, operands = zip(*(_operand(s) for s in specs))
        try:
            want = fn(*args).dtype
        except (RuntimeError, TypeError):
            continue  # a combination torch rejects
        assert core.result_dtype(name, list(operands)) == IR_NAME[want], (name, specs)
        checked += 1
    assert checked > 0
