"""The Python side of an emitted file: per plan, its steps as straight-line
torch code in functions named `_ff_<part>_<plan>` that the file's runtime
(emit/dispatch.py's `_FFPlan`) calls:

- `pick(self, args)`: the tensor arguments, and the key a CUDA graph is kept
  under (their device, the scalar arguments, which a graph holds as captured);
- `state(self)`: the parameters and buffers the plan reads, from the module;
- `consts(dev)`: the constants it lifted, made once per device;
- `prepare(ext, dev, <weights>)` and `prepared(self, ext, dev, st, cs)`: the
  prepare section, kept between calls by cached_prepare (copied from
  fuseforge.runtime.prepared);
- `run(ext, dev, xs, args, st, pre, cs)`: the run section — kernels through
  the extension (one C++ call per run of consecutive launches, cuda.py's
  segments), library calls and views as torch calls, `del` at free steps —
  then the buffer updates copied into the module's buffers; it returns the
  plan's outputs, and is what a CUDA graph captures;
- `pack(outs)`: forward's output structure;
- `guard(self, args)`: whether the plan applies (shapes, dtypes, CUDA).

Each step's code follows a comment holding its plan text, in order, so a file
and the plan it came from can be compared line by line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fuseforge.diagnostics import counted
from fuseforge.dtypes import torch_text
from fuseforge.emit.cuda import Segment
from fuseforge.emit.ops import EmitError, literal, step_expr


@dataclass
class ModePlan:
    """A plan and what it was captured from, for the modes it serves."""

    mode: str
    captured: Any  # fuseforge.capture.CapturedGraph
    compiled: Any  # core.Compiled
    modes: list[str]  # the modes this plan serves (train and eval share one when identical)

    @property
    def plan(self) -> Any:
        return self.compiled.plan


def access(dotted: str) -> str:
    """`self` followed by attribute accesses for a state_dict name ('0.weight' -> self._modules['0'].weight)."""
    *path, leaf = dotted.split(".")
    text = "self"
    for p in path:
        text += f".{p}" if p.isidentifier() else f"._modules[{p!r}]"
    return f"{text}.{leaf}" if leaf.isidentifier() else f"getattr({text}, {leaf!r})"


def _arg(b: Any) -> str:
    return f"[{b.source}]" if isinstance(b.source, int) else str(b.source)


def _const_code(name: str, t: torch.Tensor) -> str:
    if t.dim() == 1 and t.numel() > 1 and t.dtype in (torch.int32, torch.int64):  # an arange (capture keeps them)
        start, step = int(t[0]), int(t[1] - t[0])
        end = start + step * t.numel()
        if step != 0 and torch.equal(t, torch.arange(start, end, step, dtype=t.dtype)):
            return f"torch.arange({start}, {end}, {step}, dtype={t.dtype})"
    if t.numel() > 4096:
        raise EmitError(f"constant {name} has {t.numel()} elements: too large to write into the emitted file")
    return f"torch.tensor({t.tolist()!r}, dtype={t.dtype}).reshape({list(t.shape)})"


def _var(b: int) -> str:
    return f"v{b}"


def _call_code(step: Any) -> str:
    operands = [_var(o.buffer) if o.buffer >= 0 else literal(o.literal) for o in step.operands]
    expr = step_expr(step, operands)
    results = [_var(b) for b in step.results]
    if step.op == "opaque" and len(results) == 1:
        return f"{results[0]} = _ff_first({expr})"
    if len(results) == 1:
        return f"{results[0]} = {expr}"
    return f"({', '.join(results)},) = tuple({expr})"


def _launch_code(plan: Any, step: Any, kernel_fns: dict[int, str]) -> str:
    k = plan.kernels[step.kernel]
    outs = ", ".join(_var(b) for b in k.outputs)
    ins = ", ".join(_var(i.memory) for i in k.inputs)
    scalars = ", ".join(f"float({_var(b)})" for b in k.scalars)
    return f"({outs},) = ext.{kernel_fns[step.kernel]}([{ins}], [{scalars}])"


def _segment_code(seg: Segment) -> list[str]:
    """The call of a segment's C++ function, then the `del`s of what it freed that Python holds."""
    ins = ", ".join(_var(b) for b in seg.inputs)
    scalars = ", ".join(f"float({_var(b)})" for b in seg.scalars)
    call = f"ext.{seg.name}([{ins}], [{scalars}])"
    lines = [f"({', '.join(_var(b) for b in seg.outputs)},) = {call}" if seg.outputs else call]
    if seg.freed_inputs:
        lines.append(f"del {', '.join(_var(b) for b in seg.freed_inputs)}")
    return lines


def _steps_code(plan: Any, steps: Any, kernel_fns: dict[int, str], segs: Sequence[Segment] = ()) -> list[str]:
    """Each step as a comment with its plan text and the code that runs it; a
    segment's steps are comments before the one call that runs them all."""
    last = {seg.steps[-1]: seg for seg in segs}
    inside = {i for seg in segs for i in seg.steps}
    body: list[str] = []
    for i, step in enumerate(steps):
        body.append(f"# {plan.step_text(step)}")
        if i in last:
            body += _segment_code(last[i])
        elif i in inside:
            continue
        elif step.kind == "free":
            body.append(f"del {', '.join(_var(b) for b in step.results)}")
        elif step.kind == "launch":
            body.append(_launch_code(plan, step, kernel_fns))
        else:
            body.append(_call_code(step))
    return body


def _root(plan: Any, b: int) -> int:
    """The buffer whose memory `b` is (itself unless an alias)."""
    while plan.buffers[b].alias_of >= 0:
        b = plan.buffers[b].alias_of
    return b


def _pack_code(mp: ModePlan) -> list[str]:
    """`_ff_pack_<plan>`: forward's output structure from run's outputs (and the constants it returns)."""
    cap = mp.captured
    outs = iter(f"outs[{i}]" for i in range(len(mp.plan.outputs)))
    leaves = [
        literal(cap.output_constants[i]) if i in cap.output_constants else next(outs)
        for i in range(cap.output_tree.num_leaves)
    ]
    head = [f"def _ff_pack_{mp.mode}(outs):"]
    if cap.output_tree.is_leaf():
        return [*head, f"    return {leaves[0]}"]
    spec = pytree.treespec_dumps(cap.output_tree)
    return [
        f"_FF_TREE_{mp.mode} = _ff_pytree.treespec_loads({spec!r})",
        "",
        "",
        *head,
        f"    return _ff_pytree.tree_unflatten([{', '.join(leaves)}], _FF_TREE_{mp.mode})",
    ]


def forward_code(mp: ModePlan, kernel_fns: dict[int, str], segs: Sequence[Segment] = ()) -> str:
    """The functions of one plan (see the module docstring) and its
    `_FF_PLAN_<plan>` record; `segs`: its run section's segments."""
    cap, plan, m = mp.captured, mp.plan, mp.mode
    ids = {b.name: i for i, b in enumerate(plan.buffers)}
    users = [b for b in cap.input_bindings if b.kind == "user"]
    states = [b for b in cap.input_bindings if b.kind in ("param", "buffer")]
    consts = [b for b in cap.input_bindings if b.kind == "const"]
    # Where run finds each input: the tensor arguments (xs), args, the state list, the constants.
    where: dict[int, str] = {}
    where.update({ids[b.ir_name]: f"xs[{i}]" for i, b in enumerate(users)})
    where.update({ids[b.ir_name]: f"args{_arg(b)}" for b in cap.input_bindings if b.kind == "scalar"})
    where.update({ids[b.ir_name]: f"st[{i}]" for i, b in enumerate(states)})
    where.update({ids[b.ir_name]: f"cs[{i}]" for i, b in enumerate(consts)})
    state_index = {ids[b.ir_name]: i for i, b in enumerate(states)}

    out: list[str] = []
    weights, kept = list(plan.prepare_reads), list(plan.prepare_keeps)
    has_prepare = len(plan.prepare) > 0
    if has_prepare:
        params = ", ".join(_var(b) for b in weights)
        out += [
            f"def _ff_prepare_{m}(ext, dev{', ' if params else ''}{params}):",
            '    """The prepare section: what depends only on the weights it takes."""',
            *("    " + line for line in _steps_code(plan, plan.prepare, kernel_fns)),
            f"    return [{', '.join(_var(b) for b in kept)}]",
            "",
            "",
        ]
    n_calls = sum(s.kind == "call" for s in plan.run)
    run = [f"{_var(ids[b.ir_name])} = {where[ids[b.ir_name]]}" for b in cap.input_bindings]
    if kept:
        run.append(f"[{', '.join(_var(b) for b in kept)}] = pre")
    run += _steps_code(plan, plan.run, kernel_fns, segs)
    run += [f"st[{state_index[b]}].copy_({_var(v)})" for b, v in plan.mutations]
    # A constant a call returns is a new tensor in eager, never the one kept here.
    roles = [plan.buffers[_root(plan, b)].role for b in plan.outputs]
    results = [_var(b) + (".clone()" if r == "const" else "") for b, r in zip(plan.outputs, roles)]
    run.append(f"return [{', '.join(results)}]")
    out += [
        f"def _ff_run_{m}(ext, dev, xs, args, st, pre, cs):",
        f'    """The run section of the {"/".join(mp.modes)}-mode plan ({counted(len(kernel_fns), "kernel")}, '
        f'{counted(n_calls, "library call")} per call) and its buffer updates: the plan\'s outputs."""',
        *("    " + line for line in run),
        "",
        "",
    ]

    dev = "xs[0].device" if users else f"{access(states[0].source)}.device" if states else "torch.device('cuda')"
    scalar_args = [f"type(args{_arg(b)}), args{_arg(b)}" for b in cap.input_bindings if b.kind == "scalar"]
    scalar_args += [f"type(args[{i}]), args[{i}]" for i in cap.specialized_scalars]
    key = ", ".join([dev, *scalar_args])
    out += [
        f"def _ff_pick_{m}(self, args):",
        '    """The tensor arguments, and the key of their CUDA graph: their device, the scalar arguments."""',
        "    try:",
        f"        xs = [{', '.join(f'args{_arg(b)}' for b in users)}]",
        f"        key = ({key},)",
        "        hash(key)",
        "        return xs, key",
        "    except (IndexError, KeyError, TypeError, AttributeError):",
        "        return None",
        "",
        "",
        f"def _ff_state_{m}(self):",
        f"    return [{', '.join(access(b.source) for b in states)}]",
        "",
        "",
        f"def _ff_consts_{m}(dev):",
        f"    return [{', '.join(f'{_const_code(b.ir_name, cap.constants[b.source])}.to(dev)' for b in consts)}]",
        "",
        "",
    ]
    if has_prepare:
        cache = f"self.__dict__.setdefault('_ff_prepared_{m}', {{}})"
        out += [
            f"def _ff_prepared_{m}(self, ext, dev, st, cs):",
            f"    w = [{', '.join(where[b] for b in weights)}]",
            f"    return cached_prepare({cache}, w, lambda: _ff_prepare_{m}(ext, dev, *w))",
            "",
            "",
        ]
    out += [*_pack_code(mp), "", ""]
    out += [
        f"def _ff_guard_{m}(self, args):",
        f"    return len(args) == {_n_args(cap)} and (" + "\n            and ".join(_guard_code(mp)) + ")",
        "",
        "",
    ]
    mutated = tuple(state_index[b] for b, _ in plan.mutations)
    parts = ", ".join(
        f"_ff_{p}_{m}" if p != "prepared" or has_prepare else "None"
        for p in ("guard", "pick", "state", "consts", "prepared", "run", "pack")
    )
    work = any(s.kind in ("launch", "call") for s in plan.run) or bool(mutated)  # else nothing to capture
    out.append(f"_FF_PLAN_{m} = _FFPlan({m!r}, {_n_args(cap)}, {parts}, {mutated!r}, graphs={work})")
    return "\n".join(out) + "\n"


def _guard_code(mp: ModePlan) -> list[str]:
    """Conditions for the plan to apply: tensor shapes, dtypes and CUDA, scalars' types and baked values."""
    cap, plan = mp.captured, mp.plan
    ids = {b.name: i for i, b in enumerate(plan.buffers)}
    conds = []
    for b in cap.input_bindings:
        buf = plan.buffers[ids[b.ir_name]]
        if b.kind == "scalar":
            conds.append(f"isinstance(args{_arg(b)}, (int, float))")
            continue
        if b.kind == "const":
            continue
        x = f"args{_arg(b)}" if b.kind == "user" else access(b.source)
        conds.append(
            f"isinstance({x}, torch.Tensor) and {x}.is_cuda and {x}.dtype is {torch_text(buf.dtype)} "
            f"and {x}.shape == {tuple(buf.shape)}"
        )
    for i, v in cap.specialized_scalars.items():
        conds.append(f"args[{i}] == {literal(v)}")
    return conds or ["True"]


def _arg_index(source: str | int) -> int:
    """The forward argument a user or scalar input comes from: `source`, or the
    first key of its pytree key path ("[1][0]": 1)."""
    if isinstance(source, int):
        return source
    m = re.match(r"\[(\d+)\]", source)
    if m is None:
        raise ValueError(f"not a forward argument's key path: {source!r}")
    return int(m.group(1))


def _n_args(cap: Any) -> int:
    idx = [_arg_index(b.source) for b in cap.input_bindings if b.kind in ("user", "scalar")]
    return max([*idx, *cap.specialized_scalars.keys(), -1]) + 1
