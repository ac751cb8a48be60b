"""The Python side of an emitted file: per plan, its steps as straight-line
torch code. `_ff_prepare_<mode>(self, dev, <weights>)` runs the prepare
section and returns the values the run section keeps; `_ff_forward_<mode>`
reads the inputs and the module's state, takes the prepared values (kept
between calls by cached_prepare, copied from fuseforge.runtime.prepared), runs
the run section — kernels through the extension, library calls and views as
torch calls, `del` at free steps — writes buffer updates back and returns the
outputs. Each step's code follows a comment holding its plan text, in order,
so a file and the plan it came from can be compared line by line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree

from fuseforge.diagnostics import counted
from fuseforge.dtypes import torch_text
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


def _steps_code(plan: Any, steps: Any, kernel_fns: dict[int, str]) -> list[str]:
    """Each step as a comment with its plan text and the code that runs it."""
    body: list[str] = []
    for step in steps:
        body.append(f"# {plan.step_text(step)}")
        if step.kind == "free":
            body.append(f"del {', '.join(_var(b) for b in step.results)}")
        elif step.kind == "launch":
            k = plan.kernels[step.kernel]
            outs = ", ".join(_var(b) for b in k.outputs)
            ins = ", ".join(_var(i.memory) for i in k.inputs)
            scalars = ", ".join(f"float({_var(b)})" for b in k.scalars)
            body.append(f"({outs},) = ext.{kernel_fns[step.kernel]}([{ins}], [{scalars}])")
        else:
            operands = [_var(o.buffer) if o.buffer >= 0 else literal(o.literal) for o in step.operands]
            expr = step_expr(step, operands)
            results = [_var(b) for b in step.results]
            if step.op == "opaque" and len(results) == 1:
                body.append(f"{results[0]} = _ff_first({expr})")
            elif len(results) == 1:
                body.append(f"{results[0]} = {expr}")
            else:
                body.append(f"({', '.join(results)},) = tuple({expr})")
    return body


def _outputs_code(mp: ModePlan) -> str:
    cap, plan = mp.captured, mp.plan
    outs = iter(_var(b) for b in plan.outputs)
    leaves = [
        literal(cap.output_constants[i]) if i in cap.output_constants else next(outs)
        for i in range(cap.output_tree.num_leaves)
    ]
    if cap.output_tree.is_leaf():
        return f"return {leaves[0]}"
    spec = pytree.treespec_dumps(cap.output_tree)
    return f"return _ff_pytree.tree_unflatten([{', '.join(leaves)}], _ff_pytree.treespec_loads({spec!r}))"


def forward_code(mp: ModePlan, kernel_fns: dict[int, str]) -> str:
    """`_ff_prepare_<mode>`, `_ff_forward_<mode>` and `_ff_guard_<mode>` of one plan."""
    cap, plan = mp.captured, mp.plan
    ids = {b.name: i for i, b in enumerate(plan.buffers)}
    body: list[str] = []
    first_tensor = next((b for b in cap.input_bindings if b.kind == "user"), None)
    dev_src = (
        f"args{_arg(first_tensor)}"
        if first_tensor
        else access(next(b.source for b in cap.input_bindings if b.kind in ("param", "buffer")))
    )
    body.append(f"dev = {dev_src}.device")
    for b in cap.input_bindings:
        v = _var(ids[b.ir_name])
        if b.kind in ("user", "scalar"):
            body.append(f"{v} = args{_arg(b)}")
        elif b.kind == "const":
            body.append(f"{v} = {_const_code(b.ir_name, cap.constants[b.source])}.to(dev)")
        else:
            body.append(f"{v} = {access(b.source)}")
    weights, kept = list(plan.prepare_reads), list(plan.prepare_keeps)
    prepare = []
    if len(plan.prepare):
        args = ", ".join(_var(b) for b in weights)
        prepare = [
            f"def _ff_prepare_{mp.mode}(ext, dev{', ' if args else ''}{args}):",
            '    """The prepare section: what depends only on the weights it takes."""',
            *("    " + line for line in _steps_code(plan, plan.prepare, kernel_fns)),
            f"    return [{', '.join(_var(b) for b in kept)}]",
            "",
            "",
        ]
        cache = f"self.__dict__.setdefault('_ff_prepared_{mp.mode}', {{}})"
        compute = f"lambda: _ff_prepare_{mp.mode}(ext, dev{', ' if args else ''}{args})"
        call = f"cached_prepare({cache}, [{args}], {compute})"
        body.append(f"[{', '.join(_var(b) for b in kept)}] = {call}" if kept else call)
    body += _steps_code(plan, plan.run, kernel_fns)
    state = {b.ir_name: b.source for b in cap.input_bindings if b.kind in ("param", "buffer")}
    for b, v in plan.mutations:
        body.append(f"{access(state[plan.buffers[b].name])}.copy_({_var(v)})")
    body.append(_outputs_code(mp))
    n_calls = sum(s.kind == "call" for s in plan.run)
    head = [
        f"def _ff_forward_{mp.mode}(self, args):",
        f'    """The {"/".join(mp.modes)}-mode plan ({counted(len(plan.kernels), "kernel")}, '
        f'{counted(n_calls, "library call")} per call)."""',
        "    ext = _ff_extension()",
    ]
    guard = [
        f"def _ff_guard_{mp.mode}(self, args):",
        f"    return len(args) == {_n_args(cap)} and (" + "\n            and ".join(_guard_code(mp)) + ")",
    ]
    return "\n".join(prepare + head + ["    " + line for line in body]) + "\n\n\n" + "\n".join(guard) + "\n"


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
