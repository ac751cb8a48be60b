"""Lowering of an exported program to IR text: graph inputs, one IR node (or a
few) per ATen node through the handlers registered in registry.py (by the
aten_handlers*.py modules, imported here to fill it), ``opaque`` nodes for the
rest, and the outputs and buffer write-backs."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import torch
import torch.fx as fx

from fuseforge._native import core
from fuseforge.capture import aten_handlers, aten_handlers_layout, aten_handlers_reduce  # noqa: F401 (register handlers)
from fuseforge.capture.graph import CaptureError, InputBinding
from fuseforge.capture.irtext import NAME_RE, IRType, format_attr, format_literal
from fuseforge.capture.registry import lookup
from fuseforge.capture.values import Const, Lit, Unsupported, Value
from fuseforge.dtypes import IR_NAME, TORCH


def _py_value(t: torch.Tensor) -> Any:
    v = t.item()
    if t.dtype.is_floating_point:
        return float(v)
    if t.dtype == torch.bool:
        return bool(v)
    return int(v)


def _bind(node: fx.Node, op: torch._ops.OpOverload) -> dict[str, Any]:
    """The node's arguments by schema name, defaults filled in (`op`: its target)."""
    schema = op._schema
    out: dict[str, Any] = {}
    for i, a in enumerate(schema.arguments):
        if i < len(node.args) and not a.kwarg_only:
            out[a.name] = node.args[i]
        elif a.name in node.kwargs:
            out[a.name] = node.kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
        else:
            out[a.name] = None
    return out


class Lowerer:
    """One exported program's lowering; the handlers see it as a registry.Lowering."""

    def __init__(
        self,
        ep: torch.export.ExportedProgram,
        graph_name: str,
        user_leaves: list[tuple[str, str, str | int] | None],
        mutated: Mapping[int, int] | None = None,
    ):
        self.ep = ep
        self.graph_name = graph_name
        self.user_leaves = user_leaves  # per USER_INPUT spec: (ir name, kind, source) or None
        # User output leaf -> the user input whose new value it is (capture_fx's `mutated`).
        self.mutated = dict(mutated or {})
        self.user_values: list[Value | None] = []  # per USER_INPUT spec
        self.env: dict[fx.Node, Any] = {}
        self.lines: list[str] = []
        self.next_id = 0
        self.user_inputs: list[tuple[Value, str]] = []
        self.state_inputs: list[tuple[Value, str]] = []
        self.const_inputs: list[tuple[Value, str]] = []
        self.bindings_user: list[InputBinding] = []
        self.bindings_state: list[InputBinding] = []
        self.bindings_const: list[InputBinding] = []
        self.constants: dict[str, torch.Tensor] = {}
        self.aranges: dict[tuple, Const] = {}  # (start, end, step, dtype) -> one constant for equal aranges
        self.names: set[str] = set()
        self.opaque_targets: list[str] = []

    # ---- names and inputs

    def _unique(self, name: str) -> str:
        name = NAME_RE.sub("_", name) or "input"
        if name.isdigit():
            name = "_" + name
        base, k = name, 1
        while name in self.names:
            name = f"{base}_{k}"
            k += 1
        self.names.add(name)
        return name

    def _const_value(self, c: Const) -> Value:
        if c.value is None:
            name = self._unique(c.key)
            c.value = Value(name, IRType.of(c.tensor, f"constant {c.key}"))
            self.const_inputs.append((c.value, "const"))
            self.bindings_const.append(InputBinding(name, "const", name))
            self.constants[name] = c.tensor
        return c.value

    # ---- emission

    def emit(
        self, op: str, operands: Sequence[Any], types: Sequence[IRType], attrs: dict[str, Any] | None = None
    ) -> list[Value]:
        results = []
        for t in types:
            results.append(Value(str(self.next_id), t))
            self.next_id += 1
        ops = []
        for o in operands:
            if isinstance(o, Value):
                ops.append("%" + o.name)
            elif isinstance(o, Lit):
                ops.append(format_literal(o.value))
            else:
                raise CaptureError(f"internal: bad operand {o!r} for {op}")
        line = ", ".join("%" + r.name for r in results) + f" = {op}(" + ", ".join(ops) + ")"
        if attrs:
            line += " {" + ", ".join(f"{k}={format_attr(attrs[k])}" for k in sorted(attrs)) + "}"
        line += " : " + ", ".join(t.text() for t in types)
        self.lines.append(line)
        return results

    def emit1(self, op: str, operands: Sequence[Any], t: IRType, attrs: dict[str, Any] | None = None) -> Value:
        return self.emit(op, operands, [t], attrs)[0]

    # ---- operands

    def operand(self, x: Any) -> Any:
        """A tensor argument or Python number as a value or a literal."""
        if isinstance(x, fx.Node):
            v = self.env.get(x)
            if isinstance(v, Value):
                return v
            if isinstance(v, Const):
                return Lit(_py_value(v.tensor), v) if v.is_scalar else self._const_value(v)
            if isinstance(v, Lit):
                return v
            raise CaptureError(f"node {x.name} has no tensor value here ({type(v).__name__})")
        if isinstance(x, (bool, int, float)):
            return Lit(x)
        raise Unsupported(f"operand {x!r}")

    def value(self, x: Any) -> Value:
        """A tensor argument as an IR value (literals from constants become inputs)."""
        o = self.operand(x) if not isinstance(x, (Value, Lit)) else x
        if isinstance(o, Value):
            return o
        if o.const is not None:
            return self._const_value(o.const)
        raise Unsupported("a Python number where a tensor is needed")

    def types(self, node: fx.Node) -> list[IRType]:
        val = node.meta.get("val")
        what = f"node {node.name} ({node.target})"
        try:
            if isinstance(val, (list, tuple)):
                return [IRType.of(v, f"{what} result {i}") for i, v in enumerate(val)]
            return [IRType.of(val, what)]
        except CaptureError as e:  # add where the user's code made the node (after the first line)
            trace = node.meta.get("stack_trace")
            if not trace:
                e.wants_source_line = True
                raise
            raise CaptureError(f"{e}\n{trace}") from e.__cause__

    def rtype(self, node: fx.Node) -> IRType:
        ts = self.types(node)
        if len(ts) != 1:
            raise Unsupported("multiple results")
        return ts[0]

    def infer(self, fn: Callable, *args: Any) -> IRType:
        """The type of fn(*args) computed on meta tensors."""

        def meta(o: Any) -> Any:
            if isinstance(o, Value):
                return o.type.meta()
            if isinstance(o, Lit):
                if o.const is not None:
                    return o.const.tensor.to("meta")
                return o.value
            return o

        return IRType.of(fn(*[meta(a) for a in args]), "intermediate")

    def pointwise(self, op: str, operands: list[Any], t: IRType, attrs: dict | None = None) -> Value:
        if operands and all(isinstance(o, Lit) for o in operands):
            operands = [self.value(operands[0])] + list(operands[1:])
        # ops whose result is bool whatever their operands (comparisons, logical ops) need no casts
        if core.result_dtype(op, []) != "bool" and t.dtype != torch.bool:
            operands = self._cast_operands(op, operands, t.dtype)
        return self.emit1(op, operands, t, attrs)

    def _cast_operands(self, op: str, operands: list[Any], dtype: torch.dtype) -> list[Any]:
        """Makes promotion explicit: where eager computes in a wider type than its
        tensor operands have (an int tensor times a float literal, a bool tensor
        plus an int), the operands are cast to the result dtype first."""
        # the tensor operands' common dtype (the core's promotion, literals left out)
        promoted = core.common_dtype(
            op, [(IR_NAME[o.type.dtype], len(o.type.shape)) if isinstance(o, Value) else None for o in operands]
        )
        if promoted is None or TORCH[promoted] == dtype:
            return operands
        info = core.op_info(op)
        out = list(operands)
        for i, o in enumerate(out):
            if isinstance(o, Value) and o.type.dtype != dtype and info.promotes_operand(i):
                out[i] = self.emit1("cast", [o], o.type.with_dtype(dtype))
        return out

    # ---- main

    def run(self) -> dict[str, Any]:
        ep = self.ep
        sig = ep.graph_signature
        placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(sig.input_specs):
            raise CaptureError("internal: placeholders and input specs differ")
        mutated = {s.target for s in sig.output_specs if s.kind.name == "BUFFER_MUTATION"}

        user_idx = 0
        for node, spec in zip(placeholders, sig.input_specs):
            kind = spec.kind.name
            if kind == "USER_INPUT":
                leaf = self.user_leaves[user_idx] if user_idx < len(self.user_leaves) else None
                user_idx += 1
                if not isinstance(spec.arg, torch.export.graph_signature.TensorArgument):
                    self.env[node] = None
                    self.user_values.append(None)
                    continue
                if leaf is None:
                    raise CaptureError(f"internal: no binding for user input {node.name}")
                name, ikind, source = leaf
                name = self._unique(name)
                v = Value(name, IRType.of(node.meta.get("val"), f"input {name}"))
                self.env[node] = v
                self.user_values.append(v)
                # A "weight": a positional input that is a parameter (of a graph
                # AOTAutograd hands over), declared one so that what is derived
                # from it alone is prepared once, yet fetched from the arguments;
                # a "mutated" one, a buffer the graph gives a new value.
                kinds = {"scalar": "scalar", "weight": "param", "mutated": "buffer"}
                self.user_inputs.append((v, kinds.get(ikind, "")))
                binding = "user" if ikind in ("weight", "mutated") else ikind
                self.bindings_user.append(InputBinding(name, binding, source))
            elif kind in ("PARAMETER", "BUFFER"):
                if not node.users and spec.target not in mutated:
                    self.env[node] = None
                    continue
                name = self._unique(spec.target)
                v = Value(name, IRType.of(node.meta.get("val"), f"{kind.lower()} {spec.target}"))
                self.env[node] = v
                k = "param" if kind == "PARAMETER" else "buffer"
                self.state_inputs.append((v, k))
                self.bindings_state.append(InputBinding(name, k, spec.target))
            elif kind == "CONSTANT_TENSOR":
                t = ep.constants.get(spec.target)
                if not isinstance(t, torch.Tensor):
                    raise CaptureError(f"constant {spec.target} is not a tensor")
                self.env[node] = Const(spec.target, t)
            else:
                raise CaptureError(f"unsupported graph input kind {kind} ({spec.target})")

        for node in ep.graph.nodes:
            if node.op == "call_function":
                self.env[node] = self.lower(node)
            elif node.op in ("placeholder", "output"):
                continue
            else:
                raise CaptureError(f"unsupported graph node {node.format_node()}")

        self._check_rnn_types()
        return self._finish()

    def _finish(self) -> dict[str, Any]:
        sig = self.ep.graph_signature
        out_node = next(n for n in self.ep.graph.nodes if n.op == "output")
        out_args = list(out_node.args[0])
        if len(out_args) != len(sig.output_specs):
            raise CaptureError("internal: outputs and output specs differ")
        by_name = {n.name: n for n in self.ep.graph.nodes}
        outputs: list[str] = []
        input_mutations: list[tuple[str, str]] = []  # (user input, its new value): the mutated leaves
        output_constants: dict[int, Any] = {}
        mutations: list[tuple[str, str]] = []
        buffer_inputs = {b.source: b.ir_name for b in self.bindings_state if b.kind == "buffer"}
        leaf = 0
        for arg, spec in zip(out_args, sig.output_specs):
            kind = spec.kind.name
            if kind == "USER_OUTPUT":
                if isinstance(arg, fx.Node):
                    outputs.append(self._output_value(arg).name)
                    if leaf in self.mutated:
                        target = self.user_values[self.mutated[leaf]]
                        if target is None:
                            raise CaptureError(f"internal: output {leaf} updates an input that is no tensor")
                        input_mutations.append((target.name, outputs[-1]))
                elif isinstance(arg, (bool, int, float, str, type(None))):
                    output_constants[leaf] = arg
                else:
                    raise CaptureError(f"unsupported output {arg!r}")
                leaf += 1
            elif kind == "BUFFER_MUTATION":
                v = self._output_value(arg if isinstance(arg, fx.Node) else by_name[spec.arg.name])
                mutations.append((spec.target, v.name))
                if spec.target not in buffer_inputs:
                    raise CaptureError(f"internal: mutated buffer {spec.target} is not an input")
            elif kind == "USER_INPUT_MUTATION":
                trace = arg.meta.get("stack_trace") if isinstance(arg, fx.Node) else None
                error = CaptureError(
                    f"forward mutates its input {spec.target!r} in place; fuseforge graphs "
                    "may only write back buffers" + (f"\n{trace}" if trace else "")
                )
                error.wants_source_line = trace is None
                raise error
            else:
                raise CaptureError(f"unsupported graph output kind {kind} ({spec.target})")

        inputs = self.user_inputs + self.state_inputs + self.const_inputs
        head = ", ".join(f"%{v.name}: {v.type.text()}" + (f" {k}" if k else "") for v, k in inputs)
        lines = [f"graph @{self.graph_name}({head}) {{"]
        lines += ["  " + line for line in self.lines]
        lines.append("  return" + (" " + ", ".join("%" + o for o in outputs) if outputs else ""))
        for buf, name in mutations:
            lines.append(f"  mutate %{buffer_inputs[buf]} = %{name}")
        lines += [f"  mutate %{target} = %{name}" for target, name in input_mutations]
        lines.append("}")
        return dict(
            text="\n".join(lines) + "\n",
            input_bindings=self.bindings_user + self.bindings_state + self.bindings_const,
            output_names=outputs,
            mutations=[(buf, v) for buf, v in mutations],
            constants=self.constants,
            output_constants=output_constants,
            opaque_targets=self.opaque_targets,
        )

    def _output_value(self, node: fx.Node) -> Value:
        v = self.env.get(node)
        if isinstance(v, Value):
            return v
        if isinstance(v, Const):
            return self._const_value(v)
        if isinstance(v, Lit) and v.const is not None:
            return self._const_value(v.const)
        raise CaptureError(f"output {node.name} is not a tensor value")

    def _check_rnn_types(self) -> None:
        # The hidden states an RNN op returns have the shapes of the hidden states it
        # takes; older PyTorch decompositions got this wrong for LSTM (pytorch#151200).
        for node in self.ep.graph.nodes:
            if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
                continue
            if node.target.__name__.split(".")[0] not in ("lstm", "gru", "rnn_tanh", "rnn_relu"):
                continue
            hx = node.args[1]
            hx = list(hx) if isinstance(hx, (list, tuple)) else [hx]
            val = node.meta.get("val")
            for i, h in enumerate(hx):
                if not isinstance(h, fx.Node):
                    continue
                got = tuple(val[i + 1].shape)
                want = tuple(h.meta["val"].shape)
                if got != want:
                    raise CaptureError(
                        f"{node.target}: traced hidden state {i} has shape {list(got)}, "
                        f"expected {list(want)} (a PyTorch decomposition bug)"
                    )

    # ---- per-node lowering

    def lower(self, node: fx.Node) -> Any:
        target = node.target
        if target is operator.getitem:
            src, idx = cast(tuple[fx.Node, int], node.args)  # (the multi-result node, which result)
            vals = self.env.get(src)
            if not isinstance(vals, list):
                raise CaptureError(f"getitem on a single value ({node.format_node()})")
            v = vals[idx]
            if v is None:
                raise CaptureError(f"internal: result {idx} of {src.name} was not lowered")
            return v
        if not isinstance(target, torch._ops.OpOverload):
            raise CaptureError(f"unsupported graph node {node.format_node()} (target {target})")
        if not target._schema.returns and not node.users:
            return None  # a run-time check such as aten._assert_tensor_metadata: nothing to compute
        folded = self._fold_outside_ir(node, target)
        if folded is not None:
            return folded
        handler = lookup(target)
        try:
            if handler is not None:
                try:
                    return handler(self, node, _bind(node, target))
                except Unsupported:
                    pass
            return self.opaque(node, target)
        except CaptureError:
            raise
        except Exception as e:
            raise CaptureError(f"cannot lower {node.format_node()}: {type(e).__name__}: {e}") from e

    def _fold_outside_ir(self, node: fx.Node, op: torch._ops.OpOverload) -> Const | None:
        """`node` computed here, as a constant, where it reads only constants
        and one of a dtype the IR has no name for: torch.eye decomposes to
        uint8 aranges compared with each other, which the IR could not hold,
        while the comparison's result it can. None where `node` reads a
        graph value or only constants of IR dtypes (those are lowered)."""
        consts = {a: self.env.get(a) for a in node.all_input_nodes}
        if not consts or not all(isinstance(c, Const) for c in consts.values()):
            return None
        tensors = {a: cast(Const, c).tensor for a, c in consts.items()}
        if all(t.dtype in IR_NAME for t in tensors.values()):
            return None
        if op._schema.is_mutable or torch.Tag.nondeterministic_seeded in op.tags:
            return None
        args, kwargs = fx.node.map_arg((node.args, node.kwargs), lambda a: tensors[a])
        result = op(*args, **kwargs)
        if not isinstance(result, torch.Tensor):
            raise CaptureError(f"{node.format_node()}: a constant of a dtype outside the IR gives no single tensor")
        return Const(node.name, result)

    def opaque(self, node: fx.Node, op: torch._ops.OpOverload) -> Any:
        schema = op._schema
        operands: list[Value] = []

        def render(v: Any) -> str:
            if isinstance(v, fx.Node):
                operands.append(
                    self.value(v) if not isinstance(self.env.get(v), Const) else self._const_value(self.env[v])
                )
                return f"${len(operands) - 1}"
            if isinstance(v, (list, tuple)):
                return "[" + ", ".join(render(e) for e in v) + "]"
            if v is None or isinstance(v, (bool, str)):
                return repr(v)
            if isinstance(v, int):
                return str(v)
            if isinstance(v, float):
                if math.isnan(v):
                    return "nan"
                if math.isinf(v):
                    return "inf" if v > 0 else "-inf"
                return repr(v)
            if isinstance(v, torch.device):
                return f"torch.device({v.type!r}, {v.index})" if v.index is not None else f"torch.device({v.type!r})"
            if isinstance(v, (torch.dtype, torch.layout, torch.memory_format)):
                return str(v)
            raise CaptureError(f"{node.target}: cannot express argument {v!r} in an opaque node")

        positional: list[tuple[bool, Any]] = []
        kwargs: dict[str, Any] = {}
        for i, a in enumerate(schema.arguments):
            if a.kwarg_only:
                if a.name in node.kwargs:
                    kwargs[a.name] = node.kwargs[a.name]
                continue
            if i < len(node.args):
                positional.append((True, node.args[i]))
            elif a.name in node.kwargs:
                positional.append((True, node.kwargs[a.name]))
            else:
                positional.append((False, a.default_value if a.has_default_value() else None))
        while positional and not positional[-1][0]:
            positional.pop()
        attrs: dict[str, Any] = {"target": str(node.target)}
        attrs["args"] = "[" + ", ".join(render(v) for _, v in positional) + "]"
        if kwargs:
            attrs["kwargs"] = "{" + ", ".join(f"{k!r}: {render(v)}" for k, v in kwargs.items()) + "}"
        val = node.meta.get("val")
        if isinstance(val, (list, tuple)) and any(v is None for v in val):
            # An op that returns None in places (convolution_backward's
            # gradients not asked for): the node's results are the others.
            places = [i for i, v in enumerate(val) if v is not None]
            attrs["results"] = places
            types = [IRType.of(val[i], f"node {node.name} result {i}") for i in places]
            found = iter(self.emit("opaque", operands, types, attrs))
            self.opaque_targets.append(attrs["target"])
            return [next(found) if v is not None else None for v in val]
        types = self.types(node)
        results = self.emit("opaque", operands, types, attrs)
        self.opaque_targets.append(attrs["target"])
        return list(results) if isinstance(val, (list, tuple)) else results[0]
