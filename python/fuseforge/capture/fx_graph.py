"""Capture of an ATen-level FX graph that is not a torch.export program: the
forward and backward graphs AOTAutograd hands a compiler. They are already
functional and decomposed (traced with decomposition_table()), their inputs
are flat positional tensors and their outputs a flat tuple, so they lower
as they are: every placeholder is a user input, every output a user output,
a constant the graph reads through get_attr a lifted constant. Re-exporting
them would trace twice and cannot run inside autograd's own tracing."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import torch
import torch.fx as fx
from torch.export.graph_signature import (
    ConstantArgument,
    InputKind,
    InputSpec,
    OutputKind,
    OutputSpec,
    TensorArgument,
)
from torch.utils import _pytree as pytree

from fuseforge.capture.graph import CapturedGraph, CaptureError
from fuseforge.capture.lowering import Lowerer


class _FxProgram:
    """What the Lowerer reads of an ExportedProgram, for a plain graph."""

    def __init__(self, graph: fx.Graph, input_specs: list, output_specs: list, constants: dict):
        self.graph = graph
        self.graph_signature = _Signature(input_specs, output_specs)
        self.constants = constants


class _Signature:
    def __init__(self, input_specs: list, output_specs: list):
        self.input_specs = input_specs
        self.output_specs = output_specs


def _lift_get_attrs(gm: fx.GraphModule) -> tuple[fx.Graph, dict[str, torch.Tensor]]:
    """A copy of gm's graph whose get_attr tensors are placeholders after the
    inputs, and those tensors by placeholder name."""
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    constants: dict[str, torch.Tensor] = {}
    for node in gm.graph.find_nodes(op="placeholder"):
        env[node] = graph.node_copy(node, env.__getitem__)
    for node in gm.graph.find_nodes(op="get_attr"):
        value = getattr(gm, str(node.target))
        if not isinstance(value, torch.Tensor):
            raise CaptureError(f"graph attribute {node.target} is not a tensor")
        env[node] = graph.placeholder(f"const_{node.name}")
        env[node].meta["val"] = value
        constants[env[node].name] = value
    for node in gm.graph.nodes:
        if node.op not in ("placeholder", "get_attr"):
            env[node] = graph.node_copy(node, env.__getitem__)
    return graph, constants


def capture_fx(
    gm: fx.GraphModule, name: str, weights: Collection[int] = (), mutated: Mapping[int, int] | None = None
) -> CapturedGraph:
    """The IR of `gm` (an ATen graph of flat tensor inputs returning a tuple),
    called with gm's positional arguments. Outputs that are not tensors
    (None: the gradient of an input that needs none) are output constants.
    The inputs at the positions `weights` are parameters: IR `param` inputs,
    so that what derives from them alone is prepared once while they stay
    the same tensors, unchanged. `mutated` maps outputs to the inputs whose
    new values they are (the caller copies them in after the call): those
    inputs are IR `buffer`s with a `mutate` line, and still returned."""
    graph, constants = _lift_get_attrs(gm)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    input_specs = [
        InputSpec(InputKind.CONSTANT_TENSOR, TensorArgument(p.name), p.name)
        if p.name in constants
        else InputSpec(InputKind.USER_INPUT, TensorArgument(p.name), None)
        if isinstance(p.meta.get("val"), torch.Tensor)
        # A size passed as a number (a graph traced with symbolic sizes, made
        # concrete): its uses are specialized, the input itself unused.
        else InputSpec(InputKind.USER_INPUT, ConstantArgument(p.name, None), None)
        for p in placeholders
    ]
    out_node = next(n for n in graph.nodes if n.op == "output")
    outs = out_node.args[0]
    if not isinstance(outs, (tuple, list)):
        raise CaptureError("the graph must return a tuple")
    output_specs = [
        OutputSpec(
            OutputKind.USER_OUTPUT,
            TensorArgument(o.name) if isinstance(o, fx.Node) else ConstantArgument("", o),
            None,
        )
        for o in outs
    ]
    user = [p for p in placeholders if p.name not in constants]
    buffers = set((mutated or {}).values())
    leaves: list[tuple[str, str, str | int] | None] = [
        (p.name, "weight" if i in weights else "mutated" if i in buffers else "user", i) for i, p in enumerate(user)
    ]
    program = _FxProgram(graph, input_specs, output_specs, constants)
    lowered = Lowerer(program, name, leaves, mutated or {}).run()  # type: ignore[arg-type]
    tree: Any = pytree.tree_flatten(tuple(range(len(outs))))[1]
    return CapturedGraph(
        text=lowered["text"],
        input_bindings=lowered["input_bindings"],
        output_names=lowered["output_names"],
        output_tree=tree,
        mutations=lowered["mutations"],
        constants=lowered["constants"],
        output_constants=lowered["output_constants"],
        opaque_targets=lowered["opaque_targets"],
    )
