"""run_decompositions node by node, for exported graphs that mutate nothing.

torch.export's run_decompositions re-traces the whole program (about 1 ms a
node on a 2-core laptop CPU: an unrolled 160-step GRU cell's 3700 nodes take 4 s).
A graph that mutates nothing needs nothing of that re-trace but the
decompositions, and those depend only on a node's op and its arguments'
metadata: each distinct node the table decomposes is exported alone (about
10 ms) and decomposed by run_decompositions itself, and its graph replaces
every node like it (an unrolled loop's steps share one). A mutation, an op
that is not an ATen overload, or a decomposition that makes constants
leaves the graph to the whole re-trace. tests/python/test_capture.py checks
that both ways lower to the same IR.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable
from typing import Any, cast

import torch
import torch.fx as fx
from torch.export.graph_signature import InputKind
from torch.utils import _pytree as pytree

Program = torch.export.ExportedProgram
log = logging.getLogger("fuseforge")


#: How many nodes the whole re-trace goes through in the time one node takes
#: exported and decomposed alone (about 1 ms against 10-20 ms, whatever the
#: CPU): fewer nodes per distinct decomposed node than this, and the whole
#: re-trace is cheaper (a DenseNet's convs each have channels of their own).
RETRACE_NODES_PER_EXPORT = 16


class _NotApplicable(Exception):
    pass


def _mutates_or_reads_attributes(node: fx.Node) -> bool:
    """Whether `node` reads a module attribute or calls a mutable ATen overload."""
    return node.op == "get_attr" or (
        node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) and node.target._schema.is_mutable
    )


def _functional(ep: Program) -> bool:
    """Whether `ep` mutates nothing and calls only ATen overloads."""
    sig = ep.graph_signature
    if sig.buffers_to_mutate or sig.user_inputs_to_mutate or sig.parameters_to_mutate or sig.output_tokens:
        return False
    for node in ep.graph.nodes:
        if _mutates_or_reads_attributes(node):
            return False
        calls_other = node.op == "call_function" and not isinstance(node.target, torch._ops.OpOverload)
        if calls_other and node.target is not operator.getitem:
            return False
    return True


def _signature(node: fx.Node) -> tuple:
    """What a node's decomposition depends on: its op, and its arguments'
    metadata (tensors) or values (the rest)."""

    def token(a: Any) -> Any:
        if isinstance(a, fx.Node):
            v = a.meta.get("val")
            if not isinstance(v, torch.Tensor):
                raise _NotApplicable
            return ("tensor", tuple(v.shape), tuple(v.stride()), v.dtype, str(v.device))
        return ("value", type(a).__name__, repr(a))

    leaves, spec = pytree.tree_flatten((node.args, node.kwargs))
    return (node.target, str(spec), tuple(token(a) for a in leaves))


class _OneNode(torch.nn.Module):
    """A module whose forward is `node`'s op, its tensor arguments passed in."""

    def __init__(self, node: fx.Node):
        super().__init__()
        self.op = cast(torch._ops.OpOverload, node.target)
        self.leaves, self.spec = pytree.tree_flatten((node.args, node.kwargs))
        self.slots = [i for i, a in enumerate(self.leaves) if isinstance(a, fx.Node)]

    def forward(self, *tensors: torch.Tensor) -> Any:
        filled = list(self.leaves)
        for i, t in zip(self.slots, tensors):
            filled[i] = t
        args, kwargs = pytree.tree_unflatten(filled, self.spec)
        return self.op(*args, **kwargs)


def _decomposed(node: fx.Node, run: Callable[[Program], Program]) -> fx.Graph:
    """`node` exported alone, on its arguments' fake values, and decomposed by `run`."""
    one = _OneNode(node)
    fakes = tuple(one.leaves[i].meta["val"] for i in one.slots)
    try:
        ep = run(torch.export.export(one, fakes, strict=False))
    except Exception as e:  # an op export cannot take alone: the whole re-trace decides
        raise _NotApplicable from e
    if any(s.kind != InputKind.USER_INPUT for s in ep.graph_signature.input_specs):
        raise _NotApplicable  # constants would have to be lifted into the program's inputs
    if any(_mutates_or_reads_attributes(n) for n in ep.graph.nodes):
        raise _NotApplicable
    return ep.graph


def _splice(graph: fx.Graph, node: fx.Node, decomposed: fx.Graph) -> None:
    """Replaces `node` by the nodes of its decomposition."""
    leaves, _ = pytree.tree_flatten((node.args, node.kwargs))
    args = iter(a for a in leaves if isinstance(a, fx.Node))
    env: dict[fx.Node, Any] = {}
    results: list = []
    with graph.inserting_before(node):
        for m in decomposed.nodes:
            if m.op == "placeholder":
                env[m] = next(args)
            elif m.op == "output":
                results = [env[x] for x in m.args[0]]
            else:
                copy = graph.node_copy(m, lambda x: env[x])
                for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
                    if key in node.meta:
                        copy.meta[key] = node.meta[key]
                env[m] = copy
    if isinstance(node.meta.get("val"), (list, tuple)):
        for user in list(node.users):  # getitems only (decompose_by_node checked)
            user.replace_all_uses_with(results[cast(int, user.args[1])])
            graph.erase_node(user)
    else:
        node.replace_all_uses_with(results[0])
    graph.erase_node(node)


def decompose_by_node(
    ep: Program, decomposes: Callable[[Any], bool], run: Callable[[Program], Program]
) -> Program | None:
    """`ep` with each node whose op `decomposes` replaced, in place, by that
    node decomposed alone by `run` (run_decompositions); None where the graph
    needs the whole re-trace (then `ep` is as it was)."""
    if not _functional(ep):
        return None
    targets = [n for n in ep.graph.nodes if n.op == "call_function" and decomposes(n.target)]
    try:
        keys = [_signature(n) for n in targets]
    except _NotApplicable:
        return None
    if len(ep.graph.nodes) < RETRACE_NODES_PER_EXPORT * len(set(keys)):
        return None  # the whole re-trace is cheaper
    if any(
        isinstance(n.meta.get("val"), (list, tuple)) and any(u.target is not operator.getitem for u in n.users)
        for n in targets
    ):
        return None
    graphs: dict[tuple, fx.Graph] = {}
    try:
        for node, key in zip(targets, keys):
            if key not in graphs:
                graphs[key] = _decomposed(node, run)
    except _NotApplicable:
        return None
    gm = ep.graph_module
    with gm._set_replace_hook(ep.graph_signature.get_replace_hook()):
        for node, key in zip(targets, keys):
            _splice(ep.graph, node, graphs[key])
    log.debug("fuseforge: decomposed %d nodes by %d exported alone", len(targets), len(graphs))
    ep.graph.eliminate_dead_code()  # results a decomposition leaves unread, as the re-trace drops them
    ep.graph.lint()
    gm.recompile()
    return ep
