"""run_decompositions node by node, for exported graphs that mutate nothing
but their buffers.

torch.export's run_decompositions re-traces the whole program (about 1.5 ms
a node on a 2-core laptop CPU: an unrolled 160-step GRU cell's 3700 nodes
take 5.6 s). A graph that mutates nothing needs nothing of that re-trace but
the decompositions, and those depend only on a node's op and its arguments'
metadata: the distinct nodes the table decomposes are exported together (up
to NODES_PER_EXPORT a program), on arguments of their own, and decomposed by
run_decompositions itself; each one's part of the result replaces every node
like it (an unrolled loop's steps share one: 0.8 s for that GRU). In-place
ops on values the graph computes (nn.ReLU(inplace=True), `out += identity`)
become their out-of-place forms first (torchvision's ResNet-101 in eval
mode: 0.55 s against the re-trace's 2.2). Writes to module buffers become
buffer updates, as the re-trace makes them: an in-place op on a buffer
(BatchNorm's num_batches_tracked += 1) its out-of-place form, and the
running statistics a node's decomposition writes (train-mode batch_norm)
its new values, returned as the buffers' mutations (ResNet-101 in train
mode: 1.1 s against 2.9). A mutation of anything else, an op that is not an
ATen overload, or a decomposition that makes constants leaves the graph to
the whole re-trace.
tests/python/test_capture.py checks that both ways lower to the same IR."""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable
from typing import Any, cast

import torch
import torch.fx as fx
from torch.export.graph_signature import InputKind, OutputKind, OutputSpec, TensorArgument
from torch.utils import _pytree as pytree

Program = torch.export.ExportedProgram
log = logging.getLogger("fuseforge")


#: Distinct nodes exported in one program. Export's guard setup grows with the
#: square of a program's inputs (torch 2.11's _unlift: 9 of the 12 s that a
#: DenseNet-201's 212 distinct nodes took in one program on a 2-core CPU); in
#: programs of 60, 100 and 200 nodes they took 10.5, 8.7 and 9.3 s.
NODES_PER_EXPORT = 100


class _NotApplicable(Exception):
    pass


def _mutates_or_reads_attributes(node: fx.Node) -> bool:
    """Whether `node` reads a module attribute or calls a mutable ATen overload."""
    return node.op == "get_attr" or (
        node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) and node.target._schema.is_mutable
    )


def _in_place_variant_of(op: Any) -> Any:
    """The out-of-place overload of an in-place ATen op that writes only its
    first argument and returns it (relu_, add_.Tensor: relu, add.Tensor);
    None for any other op."""
    if not isinstance(op, torch._ops.OpOverload):
        return None
    schema = op._schema
    name = schema.name.split("::")[-1]
    if not name.endswith("_") or name.startswith("_") or not schema.arguments or len(schema.returns) != 1:
        return None
    first = schema.arguments[0].alias_info
    if first is None or not first.is_write or any(a.alias_info is not None for a in schema.arguments[1:]):
        return None
    packet = getattr(torch.ops.aten, name[:-1], None)
    functional = getattr(packet, op._overloadname, None) if packet is not None else None
    if not isinstance(functional, torch._ops.OpOverload) or functional._schema.is_mutable:
        return None
    return functional


def _aliases(node: fx.Node) -> bool:
    """Whether `node`'s result may share memory with an argument (a view)."""
    if node.op != "call_function":
        return True
    if node.target is operator.getitem:  # one result of a multi-result op: a view where that op makes views (split)
        return isinstance(node.args[0], fx.Node) and _aliases(node.args[0])
    if not isinstance(node.target, torch._ops.OpOverload):
        return True
    return any(r.alias_info is not None for r in node.target._schema.returns)


_DROPOUTS_IN_PLACE = {
    torch.ops.aten.dropout_.default,
    torch.ops.aten.feature_dropout_.default,
    torch.ops.aten.alpha_dropout_.default,
    torch.ops.aten.feature_alpha_dropout_.default,
}


def _arg(node: fx.Node, index: int, name: str) -> Any:
    return node.args[index] if len(node.args) > index else node.kwargs.get(name)


def _out_of_place(graph: fx.Graph, node: fx.Node, functional: Any) -> fx.Node | None:
    """A call of `functional`, in-place `node`'s out-of-place form, inserted
    before it; None (nothing inserted) where its result would differ from
    the in-place one in dtype, shape or strides (type promotion the in-place
    form does not do) or the out-of-place form rejects the arguments."""
    val = node.meta.get("val")
    fake_mode = getattr(val, "fake_mode", None)  # val is a FakeTensor
    if not isinstance(val, torch.Tensor) or fake_mode is None:
        return None

    def fake(a: Any) -> Any:
        return a.meta.get("val") if isinstance(a, fx.Node) else a

    try:
        with fake_mode:
            out = functional(*pytree.tree_map(fake, node.args), **pytree.tree_map(fake, node.kwargs))
    except Exception:  # noqa: BLE001 - an op the out-of-place form rejects stays in place
        return None
    if (out.dtype, out.shape, out.stride()) != (val.dtype, val.shape, val.stride()):
        return None
    with graph.inserting_before(node):
        replacement = graph.call_function(functional, node.args, node.kwargs)
    replacement.meta = {**node.meta, "val": out}
    return replacement


def _read_after(old: fx.Node, new: fx.Node) -> None:
    """The nodes after `new` that read `old`, the outputs among them, read
    `new`: it is the value `old` holds from there on (fx orders nodes by
    their place in the graph)."""
    for reader in list(old.users):
        if reader > new:
            reader.replace_input_with(old, new)


def _functionalize_in_place(graph: fx.Graph) -> None:
    """Rewrites in-place ops on values the graph computes (nn.ReLU(inplace=True),
    `out += identity`) as their out-of-place forms, the value's later readers
    reading the new one: the same program, and one node-by-node decomposition
    can take. Left as they are where that would not be the same: the value
    is a graph input, a view or viewed (the write would reach other tensors),
    or the out-of-place result would differ in dtype, shape or strides
    (type promotion the in-place form does not do)."""
    for node in list(graph.nodes):
        if node.target in _DROPOUTS_IN_PLACE:
            if not _arg(node, 2, "train"):
                node.replace_all_uses_with(node.args[0])  # an eval-mode dropout is its input, not a copy of it
                graph.erase_node(node)
            # A train-mode one draws its mask by bernoulli_ where the out-of-place
            # form calls native_dropout: not the same program.
            continue
        functional = _in_place_variant_of(node.target) if node.op == "call_function" else None
        target = node.args[0] if node.args else None
        if functional is None or not isinstance(target, fx.Node) or _aliases(target):
            continue
        if any(u is not node and _aliases(u) for u in target.users):
            continue
        replacement = _out_of_place(graph, node, functional)
        if replacement is None:
            continue
        node.replace_all_uses_with(replacement)
        graph.erase_node(node)
        _read_after(target, replacement)


class _BufferWrites:
    """The new values of `ep`'s buffers, kept in its signature as the
    re-trace writes them: one BUFFER_MUTATION output per written buffer, in
    the order of the inputs, before the user's outputs. The program stays
    the same program after every write, so the re-trace can still take it."""

    def __init__(self, ep: Program):
        self.ep = ep
        sig = ep.graph_signature
        placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
        self.buffers = {
            p: spec.target for p, spec in zip(placeholders, sig.input_specs) if spec.kind == InputKind.BUFFER
        }
        self.new: dict[fx.Node, fx.Node] = {}  # buffer placeholder -> its latest value

    def buffer_of(self, value: fx.Node) -> fx.Node | None:
        """The buffer whose value (as read or as last written) `value` is."""
        if value in self.buffers:
            return value
        return next((b for b, v in self.new.items() if v is value), None)

    def write(self, buffer: fx.Node, value: fx.Node) -> None:
        """`value` is `buffer`'s new value: the nodes after it that read the
        buffer, and the outputs, read that, and the program returns it as the
        buffer's mutation."""
        # A returned buffer is the tensor written in place: its new value too.
        _read_after(self.new.get(buffer, buffer), value)
        self.new[buffer] = value
        out = self.ep.graph.output_node()
        specs = self.ep.graph_signature.output_specs
        returned = [(a, s) for a, s in zip(out.args[0], specs) if s.kind != OutputKind.BUFFER_MUTATION]
        written = sorted(self.new.items(), key=lambda bv: bv[0])  # in the order of the inputs
        out.args = ([v for _, v in written] + [a for a, _ in returned],)
        specs[:] = [
            OutputSpec(kind=OutputKind.BUFFER_MUTATION, arg=TensorArgument(name=v.name), target=self.buffers[b])
            for b, v in written
        ] + [s for _, s in returned]


def _functionalize_buffer_writes(writes: _BufferWrites) -> None:
    """Rewrites in-place ops on buffers (BatchNorm's num_batches_tracked += 1)
    as their out-of-place forms, each result the buffer's new value. Left as
    they are where a view reads the buffer (the write would reach it) or the
    out-of-place form is not the same (_out_of_place)."""
    graph = writes.ep.graph
    for node in list(graph.nodes):
        functional = _in_place_variant_of(node.target) if node.op == "call_function" else None
        target = node.args[0] if functional is not None and node.args else None
        if not isinstance(target, fx.Node):
            continue
        buffer = writes.buffer_of(target)
        # (The output reads the value as the buffer's mutation, written here.)
        if buffer is None or any(u is not node and u.op != "output" and _aliases(u) for u in target.users):
            continue
        replacement = _out_of_place(graph, node, functional)
        if replacement is None:
            continue
        node.replace_all_uses_with(replacement)
        graph.erase_node(node)
        writes.write(buffer, replacement)


def _functional(ep: Program) -> bool:
    """Whether `ep` mutates nothing but its buffers (as outputs) and calls
    only ATen overloads."""
    sig = ep.graph_signature
    if sig.user_inputs_to_mutate or sig.parameters_to_mutate or sig.output_tokens:
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


class _DistinctNodes(torch.nn.Module):
    """A module whose forward calls each node's op on tensors passed in (one
    per tensor argument, in order) and returns all their results."""

    def __init__(self, nodes: list[fx.Node]):
        super().__init__()
        self.calls = []
        for node in nodes:
            leaves, spec = pytree.tree_flatten((node.args, node.kwargs))
            slots = [i for i, a in enumerate(leaves) if isinstance(a, fx.Node)]
            self.calls.append((cast(torch._ops.OpOverload, node.target), leaves, spec, slots))

    def forward(self, *tensors: torch.Tensor) -> tuple:
        given = iter(tensors)
        results = []
        for op, leaves, spec, slots in self.calls:
            filled = list(leaves)
            for i in slots:
                filled[i] = next(given)
            args, kwargs = pytree.tree_unflatten(filled, spec)
            results.append(op(*args, **kwargs))
        return tuple(results)


def _fresh(node: fx.Node) -> torch.Tensor:
    """A new fake tensor like `node`'s value: each argument its own input, as
    in the graph it came from (a tensor passed twice would alias)."""
    v = node.meta["val"]
    with v.fake_mode:
        return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=v.device)


def _decomposed(nodes: list[fx.Node], run: Callable[[Program], Program]) -> list[tuple[fx.Graph, list[int]]]:
    """Each of `nodes` decomposed by `run`: all exported together, on fake
    arguments (one export costs about as much as 100 nodes of it), and the
    decomposed graph split back into one graph per node (each node's results
    tensors, as decompose_by_node checks first), with the tensor arguments
    it writes (train-mode batch_norm's running statistics): their new values
    follow the node's results among the graph's outputs."""
    module = _DistinctNodes(nodes)
    fakes = tuple(_fresh(leaves[i]) for _, leaves, _, slots in module.calls for i in slots)
    try:
        ep = run(torch.export.export(module, fakes, strict=False))
    except Exception as e:  # an op export cannot take alone: the whole re-trace decides
        raise _NotApplicable from e
    if any(s.kind != InputKind.USER_INPUT for s in ep.graph_signature.input_specs):
        raise _NotApplicable  # constants would have to be lifted into the program's inputs
    if any(
        s.kind not in (OutputKind.USER_OUTPUT, OutputKind.USER_INPUT_MUTATION) for s in ep.graph_signature.output_specs
    ):
        raise _NotApplicable
    if any(_mutates_or_reads_attributes(n) for n in ep.graph.nodes):
        raise _NotApplicable
    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
    slot_of = {p.name: i for i, p in enumerate(placeholders)}
    flat = list(ep.graph.output_node().args[0])
    specs = ep.graph_signature.output_specs
    written = {slot_of[s.target]: a for a, s in zip(flat, specs) if s.kind == OutputKind.USER_INPUT_MUTATION}
    if any(a.target is torch.ops.aten.copy.default for a in written.values()):
        # A write through a view (instance_norm's statistics, computed per
        # sample and copied in): the whole re-trace folds that copy away.
        raise _NotApplicable
    outputs = [a for a, s in zip(flat, specs) if s.kind == OutputKind.USER_OUTPUT]
    graphs = []
    first = 0  # the node's first argument among the placeholders
    for node, (_, _, _, slots) in zip(nodes, module.calls):
        mine = placeholders[first : first + len(slots)]
        count = len(_results(node))
        results, outputs = outputs[:count], outputs[count:]
        writes = sorted(i - first for i in written if first <= i < first + len(slots))
        graphs.append((_own_graph(ep.graph, mine, results + [written[first + i] for i in writes]), writes))
        first += len(slots)
    if first != len(placeholders) or outputs:
        raise _NotApplicable
    return graphs


def _results(node: fx.Node) -> list[Any]:
    """`node`'s result values, one per result."""
    value = node.meta.get("val")
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _own_graph(graph: fx.Graph, inputs: list[fx.Node], results: list[fx.Node]) -> fx.Graph:
    """The part of `graph` that computes `results` from `inputs`, as a graph of
    its own; _NotApplicable where it reads any other input."""
    needed: set[fx.Node] = set()
    stack = list(results)
    while stack:
        n = stack.pop()
        if n not in needed:
            needed.add(n)
            stack.extend(n.all_input_nodes)
    own = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for p in inputs:
        env[p] = own.placeholder(p.name)
        env[p].meta = dict(p.meta)
    for n in graph.nodes:
        if n not in needed or n in env:
            continue
        if n.op == "placeholder":
            raise _NotApplicable  # shared with another node's decomposition
        env[n] = own.node_copy(n, lambda x: env[x])
    own.output([env[r] for r in results])
    return own


def _tensor_args(node: fx.Node) -> list[fx.Node]:
    leaves, _ = pytree.tree_flatten((node.args, node.kwargs))
    return [a for a in leaves if isinstance(a, fx.Node)]


def _splice(graph: fx.Graph, node: fx.Node, decomposed: fx.Graph) -> list[fx.Node]:
    """Replaces `node` by the nodes of its decomposition; returns the
    decomposition's outputs after the node's own results (the new values of
    the arguments it writes)."""
    args = iter(_tensor_args(node))
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
                for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):  # the user's, not _DistinctNodes'
                    if key in node.meta:
                        copy.meta[key] = node.meta[key]
                    else:
                        copy.meta.pop(key, None)
                env[m] = copy
    count = len(_results(node))
    if isinstance(node.meta.get("val"), (list, tuple)):
        for user in list(node.users):  # getitems only (decompose_by_node checked)
            user.replace_all_uses_with(results[cast(int, user.args[1])])
            graph.erase_node(user)
    else:
        node.replace_all_uses_with(results[0])
    graph.erase_node(node)
    return results[count:]


def decompose_by_node(
    ep: Program, decomposes: Callable[[Any], bool], run: Callable[[Program], Program]
) -> Program | None:
    """`ep` with each node whose op `decomposes` replaced, in place, by that
    node decomposed alone by `run` (run_decompositions); None where the graph
    needs the whole re-trace (then `ep` is the same program, its in-place ops
    on computed values and buffers perhaps rewritten out of place)."""
    if ep.graph_signature.buffers_to_mutate:
        return None  # written as outputs already: nothing here keeps track of those
    _functionalize_in_place(ep.graph)
    writes = _BufferWrites(ep)
    with ep.graph_module._set_replace_hook(ep.graph_signature.get_replace_hook()):
        _functionalize_buffer_writes(writes)
    ep.graph_module.recompile()
    if not _functional(ep):
        return None
    targets = [n for n in ep.graph.nodes if n.op == "call_function" and decomposes(n.target)]
    try:
        keys = [_signature(n) for n in targets]
    except _NotApplicable:
        return None
    if any(
        isinstance(n.meta.get("val"), (list, tuple)) and any(u.target is not operator.getitem for u in n.users)
        for n in targets
    ):
        return None
    if any(not all(isinstance(v, torch.Tensor) for v in _results(n)) for n in targets):
        return None  # a None among a node's results: the program's flat outputs would not line up
    first: dict[tuple, fx.Node] = {}  # each distinct node's first occurrence
    for node, key in zip(targets, keys):
        first.setdefault(key, node)
    distinct = list(first.values())
    try:
        decomposed = [
            g
            for i in range(0, len(distinct), NODES_PER_EXPORT)
            for g in _decomposed(distinct[i : i + NODES_PER_EXPORT], run)
        ]
    except _NotApplicable:
        return None
    graphs = dict(zip(first, decomposed))
    for node, key in zip(targets, keys):  # what a decomposition writes must be a buffer
        args = _tensor_args(node)
        if any(writes.buffer_of(args[i]) is None for i in graphs[key][1]):
            return None
    gm = ep.graph_module
    with gm._set_replace_hook(ep.graph_signature.get_replace_hook()):
        for node, key in zip(targets, keys):
            graph, written = graphs[key]
            args = _tensor_args(node)
            for i, value in zip(written, _splice(ep.graph, node, graph)):
                writes.write(cast(fx.Node, writes.buffer_of(args[i])), value)
    log.debug("fuseforge: decomposed %d nodes by %d exported alone", len(targets), len(graphs))
    ep.graph.eliminate_dead_code()  # results a decomposition leaves unread, as the re-trace drops them
    ep.graph.lint()
    gm.recompile()
    return ep
