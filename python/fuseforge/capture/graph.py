"""What capture returns: the IR text of one model and how to call it
(CapturedGraph, with an InputBinding per graph input), and CaptureError."""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn
from torch.utils import _pytree as pytree


class CaptureError(RuntimeError):
    """The model cannot be captured; the message says why (for a failure of
    ``torch.export`` it carries export's own message)."""

    #: What a failed torch.export printed while it ran (its partial graph); "" otherwise.
    details: str = ""
    #: The error is about one node and would name the line of the user's code
    #: that made it, had export recorded stack traces (capture asks for them
    #: only then: recording them is about a sixth of export's time).
    wants_source_line: bool = False


@dataclass
class InputBinding:
    """How to fetch one IR graph input at call time."""

    ir_name: str
    # "user" | "param" | "buffer" | "const" | "scalar"
    kind: str
    # param/buffer: the state_dict name (for a non-persistent buffer: its name in
    # named_buffers()); const: the key in CapturedGraph.constants (= ir_name); user/scalar: the
    # positional index in forward's arguments, or for a tensor nested inside an
    # argument (a tuple of tensors) the pytree key path of it, e.g. "[1][0]".
    source: str | int

    def fetch_arg(self, args: Sequence[Any]) -> Any:
        """The value of a user/scalar input from forward's positional arguments."""
        if isinstance(self.source, int):
            return args[self.source]
        value: Any = args
        for key in re.findall(r"\[([^\]]*)\]", self.source):
            value = value[int(key)] if key.lstrip("-").isdigit() else value[ast.literal_eval(key)]
        return value


def resolve_attribute(module: nn.Module, dotted: str) -> tuple[nn.Module, str]:
    """(owning submodule, attribute name) of a dotted state name ('0.weight')."""
    *path, leaf = dotted.split(".")
    for p in path:
        module = getattr(module, p)
    return module, leaf


@dataclass
class CapturedGraph:
    """The IR of one model for one set of input types, and how to call it."""

    text: str  # IR text per docs/IR.md
    input_bindings: list[InputBinding]  # one per IR graph input, in order
    output_names: list[str]  # IR value names of the tensor outputs, in leaf order
    output_tree: Any  # pytree TreeSpec of forward's output
    mutations: list[tuple[str, str]]  # (buffer state_dict name, IR value name)
    constants: dict[str, torch.Tensor]  # IR input name -> lifted constant (kind "const")
    # forward positional index -> value of a non-tensor argument that was baked
    # into the graph (a Python number that could not become a scalar input, None,
    # a string, ...): the graph is only valid for calls with these values.
    specialized_scalars: dict[int, Any] = field(default_factory=dict)
    # output leaf index -> a non-tensor value forward returns there (not in output_names)
    output_constants: dict[int, Any] = field(default_factory=dict)
    # ATen targets of the opaque nodes, in graph order (diagnostics)
    opaque_targets: list[str] = field(default_factory=list)

    def input_getters(self, model: nn.Module, device: Any = None) -> list[tuple[str, Any]]:
        """Per IR graph input, in order, how to get it at call time:
        ("arg", fetch(args)) for forward's arguments, ("const", tensor) for a
        lifted constant (moved to `device` if given), ("state", (module,
        attribute)) for a parameter or buffer, read live so a replaced one is seen."""
        getters: list[tuple[str, Any]] = []
        for b in self.input_bindings:
            if b.kind in ("user", "scalar"):
                getters.append(("arg", b.fetch_arg))
            elif b.kind == "const":
                c = self.constants[cast(str, b.source)]  # const, param, buffer: a name
                getters.append(("const", c.to(device) if device is not None else c))
            else:
                getters.append(("state", resolve_attribute(model, cast(str, b.source))))
        return getters

    def graph_inputs(self, model: nn.Module, args: Sequence[Any]) -> list[Any]:
        """The IR graph's inputs, in order, for a call of `model` with `args`."""
        return [
            src(args) if kind == "arg" else src if kind == "const" else getattr(*src).detach()
            for kind, src in self.input_getters(model)
        ]

    def unflatten_outputs(self, tensors: Sequence[Any]) -> Any:
        """Rebuilds forward's output structure from the values of output_names."""
        if not self.output_constants and self.output_tree.is_leaf():  # forward returns one tensor
            return tensors[0]
        it = iter(tensors)
        leaves = [
            self.output_constants[i] if i in self.output_constants else next(it)
            for i in range(self.output_tree.num_leaves)
        ]
        return pytree.tree_unflatten(leaves, self.output_tree)
