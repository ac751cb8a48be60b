"""Training: a model's forward and backward graphs, from AOTAutograd, each
compiled to a fuseforge plan.

AOTAutograd traces the model with its parameters and buffers as inputs,
functionalizes it (a train-mode BatchNorm's running statistics come back as
outputs that its runtime copies into the buffers, once per forward) and
splits the joint graph with the min-cut partitioner: what the backward needs
is saved or recomputed, whichever keeps less memory alive. The two graphs it
hands over are ATen graphs already decomposed with fuseforge's table; each
is captured without re-tracing (capture.fx_graph) and compiled like any
model. AOTAutograd's autograd.Function connects them: gradients accumulate
into `.grad`, inputs that require grad get theirs, and a double backward
raises its one-line error.

The same compilers serve `torch.compile(..., backend="fuseforge")` (through
dynamo's aot_autograd) and `fuseforge.optimize` (through
aot_module_simplified on the module itself).
"""

from __future__ import annotations

import atexit
import logging
import weakref
from collections.abc import Callable, Collection, Sequence
from typing import Any

import torch
import torch.fx as fx
from torch import nn
from torch._functorch.aot_autograd import make_boxed_func
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.utils import _pytree as pytree

from fuseforge._native import core
from fuseforge.capture import CaptureError, decomposition_table
from fuseforge.capture.decompositions import own_instance_norm
from fuseforge.capture.fx_graph import capture_fx
from fuseforge.capture.rnn_ops import opaque_rnns, restore_aten_targets
from fuseforge.capture.tensor_attributes import plain_tensors, tensor_attributes_as_buffers
from fuseforge.diagnostics import one_line
from fuseforge.runtime import cuda_graph, fast_call
from fuseforge.runtime.executor import Executor
from fuseforge.runtime.options import compile_ir
from fuseforge.runtime.precision import precision_context

log = logging.getLogger("fuseforge")

#: Every compiled graph alive. AOTAutograd's autograd nodes keep graphs alive
#: until the tensors of the last step go, which at interpreter exit can be
#: after the core's bindings are torn down; their plans are dropped first.
_LIVE: weakref.WeakSet[CompiledGraph] = weakref.WeakSet()


def _arg_index(fetch: Any) -> Any:
    """The argument position an "arg" getter reads (CapturedGraph.input_getters)."""
    return getattr(getattr(fetch, "__self__", None), "source", None)


def _device_of(example_inputs: Sequence[Any]) -> torch.device:
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            return x.device
    return torch.device("cpu")


class CompiledGraph:
    """One forward or backward graph as a fuseforge plan, called the way
    AOTAutograd calls a compiled graph: with one list of arguments, which it
    empties so that inputs are freed as soon as the plan is done with them."""

    # The state lives in slots: wrappers dynamo puts around a compiled graph
    # copy its __dict__ (functools.wraps), which would keep the plan alive
    # past release(). The dict holds only the calling convention's flag,
    # which those wrappers must see.
    __slots__ = (
        "device",
        "captured",
        "compiled",
        "executor",
        "getters",
        "precision",
        "fast",
        "fixed",
        "kind",
        "graphed",
        "ran",
        "__dict__",
        "__weakref__",
    )

    def __init__(
        self,
        gm: fx.GraphModule,
        example_inputs: Sequence[Any],
        name: str,
        precision: str,
        weights: Collection[int] = (),
        fixed: Collection[int] = (),
    ):
        self._boxed_call = True
        self.device = _device_of(example_inputs)
        # A backward mutates nothing; a forward's or an inference graph's
        # buffer updates are written into the buffers themselves, which are
        # then no parameters whose derived values could be prepared once.
        mutated = _mutated_inputs(gm) if name != "backward" else {}
        weights = [i for i in weights if i not in mutated.values()]
        self.captured = capture_fx(gm, name, weights, mutated)
        arch = core.device_arch(self.device.index or 0) if self.device.type == "cuda" else 0
        cuda = self.device if self.device.type == "cuda" else None
        # AOTAutograd hands a backward its saved values and lets go of them
        # (the argument list is emptied below): the plan frees each after its
        # last read, as eager's autograd frees a node's saved tensors.
        backward = name == "backward"
        donated = _donated_inputs(gm) if backward else []
        self.compiled = compile_ir(
            self.captured.text, precision, arch, device=cuda, release_inputs=backward, donated=donated
        )
        self.executor = Executor(self.compiled.plan, self.device)
        self.getters = self.captured.input_getters(gm, self.device)
        self.precision = precision
        self.fast: Any = None  # the native call path, armed at the first call; False: none
        self.fixed = frozenset(fixed)  # the arguments that are the same tensors at every call (dynamo's static inputs)
        self.kind = name  # forward, backward or inference
        self.graphed: bool | None = None  # whether the plan replays as a CUDA graph; None: not decided yet
        self.ran = False  # whether a call has run (an inference graph's replay is decided at the second)
        _LIVE.add(self)

    def release(self) -> None:
        """Drops the plan (at exit: see _LIVE); the graph cannot run after."""
        self.executor = self.compiled = self.fast = None  # type: ignore[assignment]

    def __call__(self, args: list) -> list:
        if self.fast and self.graphed is not None:
            # Natively (fast_call.arm_graph; it empties args), or None for a call unlike the armed one.
            outputs = self.fast(args)
            if outputs is not None:
                return list(self.captured.unflatten_outputs(outputs))
        inputs = [src(args) if kind == "arg" else src for kind, src in self.getters]
        # Armed after the first run (kernels autotuned at it launch natively),
        # again after a declined call (a weight the prepare section read changed).
        arm = tuple(args) if self.fast is not False and self.device.type == "cuda" else None
        args.clear()
        with torch.no_grad(), precision_context(self.precision):
            outputs, _ = self.executor(inputs, handed_over=arm is None)
        if arm is not None:
            self.fast = fast_call.arm_graph(self.executor, self.getters, arm, inputs, self.precision) or False
            # An inference graph's replay is timed at its second call, not
            # its first: at the first, which dynamo makes straight after its
            # compile, the step-by-step run timed 2-4x its later time (an
            # H200: 0.17-0.37 against 0.085 ms for a layer norm over 12 x
            # 1.2 M elements) while a replay timed its own, and replays were
            # kept that lose. A training graph replays only when told to.
            if self.graphed is None and (self.ran or self.kind != "inference"):
                self.graphed = self._adopt_graph(arm, inputs)
        self.ran = True
        return list(self.captured.unflatten_outputs(outputs))

    def _adopt_graph(self, args: tuple, inputs: list) -> bool:
        """Whether the plan replays as a CUDA graph from now on (cuda_graph.adopt,
        timed against the native call path); re-armed if so."""
        varying = [kind == "arg" and _arg_index(src) not in self.fixed for kind, src in self.getters]
        # The graph writes buffer updates into the buffers (the arguments
        # AOTAutograd then copies them into: a copy onto itself, skipped).
        at = {slot: i for i, slot in enumerate(self.executor.input_slots)}
        buffers = [(value, inputs[at[buffer]]) for buffer, value in self.executor.plan.mutations]

        def armed_call() -> Callable[[], object]:
            fast = fast_call.arm_graph(self.executor, self.getters, args, inputs, self.precision)
            return (lambda: fast(list(args))) if fast else (lambda: self.executor(inputs))

        with torch.no_grad(), precision_context(self.precision):
            training = self.kind != "inference"
            graphed = cuda_graph.adopt(self.executor, inputs, varying, buffers, armed_call, training)
        if graphed:
            self.fast = fast_call.arm_graph(self.executor, self.getters, args, inputs, self.precision) or False
        return graphed


def _mutated_inputs(gm: fx.GraphModule) -> dict[int, int]:
    """A forward or inference graph's outputs that are inputs' new values (a
    train-mode BatchNorm's running statistics: AOTAutograd copies each into
    its input after the call), by output position: the input's position. The
    plan may then write them in place (the copy is then of a tensor onto
    itself)."""
    context = torch._guards.TracingContext.try_get()
    meta = context.fw_metadata if context is not None else None
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    if meta is None or len(meta.input_info) != len(placeholders):
        return {}
    outputs = next(iter(gm.graph.find_nodes(op="output"))).args[0]
    mutated: dict[int, int] = {}
    for position, index in enumerate(meta.mutated_inp_runtime_indices):
        info, new, old = meta.input_info[index], outputs[position], placeholders[index].meta.get("val")
        value = new.meta.get("val") if isinstance(new, fx.Node) else None
        if not (isinstance(value, torch.Tensor) and isinstance(old, torch.Tensor)):
            continue
        same_type = (value.shape, value.dtype, value.stride()) == (old.shape, old.dtype, old.stride())
        if info.mutates_data and not info.mutates_metadata and not info.requires_grad and same_type:
            mutated[position] = index
    return mutated


def _donated_inputs(gm: fx.GraphModule) -> list[str]:
    """The backward's saved values that AOTAutograd donates, by placeholder
    name: no input or output of the forward shares their memory, and it
    refuses a backward that keeps its graph (retain_graph) when there are
    any, so the plan may write over them once it has read them."""
    context = torch._guards.TracingContext.try_get()
    indices = getattr(context.fw_metadata, "bw_donated_idxs", None) if context is not None else None
    names = [n.name for n in gm.graph.find_nodes(op="placeholder")]
    return [names[i] for i in indices or () if i < len(names)]


@atexit.register
def _release_all() -> None:
    for graph in list(_LIVE):
        graph.release()


def graph_compiler(
    kind: str, precision: str, compiled: list[CompiledGraph] | None = None, state: int = 0
) -> Callable[..., Any]:
    """An AOTAutograd compiler of `kind` ("forward", "backward" or
    "inference") graphs; each compiled graph is appended to `compiled`.
    `state`: how many of a forward or inference graph's first arguments are
    the module's parameters and buffers where dynamo does not say which
    (aot_module_simplified puts them first)."""

    def compile_graph(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        if restore_aten_targets(gm.graph):  # RNNs traced whole (aot_dynamo_graph)
            gm.recompile()
        # An inference graph's parameters (dynamo's static inputs) are the
        # same tensors call after call: what derives from them is prepared once.
        context = torch._guards.TracingContext.try_get()
        meta = context.fw_metadata if context is not None else None
        # Dynamo's static inputs index the forward's arguments; a backward's are saved values and gradients.
        fixed = [] if kind == "backward" else list(meta.static_input_indices) if meta is not None else []
        fixed = fixed or ([] if kind == "backward" else list(range(state)))
        weights = fixed if kind == "inference" else []
        if any(_symbolic(x) for x in example_inputs):
            log.info("fuseforge: the %s graph has symbolic sizes: a plan per input shapes", kind)
            return PerShape(gm, kind, precision, weights, fixed, compiled)
        return _compile_or_eager(gm, example_inputs, kind, precision, weights, fixed, compiled)

    return compile_graph


def _symbolic(x: Any) -> bool:
    if isinstance(x, torch.SymInt):
        return True
    return isinstance(x, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in (*x.shape, *x.stride()))


def _compile_or_eager(
    gm: fx.GraphModule,
    example_inputs: Sequence[Any],
    kind: str,
    precision: str,
    weights: Collection[int],
    fixed: Collection[int],
    compiled: list[CompiledGraph] | None,
) -> Callable[..., Any]:
    """`gm` as a CompiledGraph (appended to `compiled`), or run eagerly
    (logged) where it cannot be lowered."""
    try:
        # AOTAutograd calls compilers inside its fake mode; the graph's
        # constants, conv probes and autotuning need real tensors.
        with unset_fake_temporarily():
            graph = CompiledGraph(gm, example_inputs, kind, precision, weights, fixed)
    except (CaptureError, ValueError) as e:  # not lowerable, or not valid IR: this graph runs eagerly
        log.warning("fuseforge: the %s graph runs eagerly: %s", kind, one_line(e))
        return make_boxed_func(gm.forward)
    log.info("fuseforge: %s graph: %d kernels", kind, len(graph.compiled.plan.kernels))
    if compiled is not None:
        compiled.append(graph)
    return graph


class PerShape:
    """A graph traced with symbolic sizes (dynamo's dynamic shapes): at the
    first call with each set of input shapes and strides, the graph is
    retraced with those sizes (on fake tensors) and compiled to a plan of
    its own."""

    def __init__(
        self,
        gm: fx.GraphModule,
        kind: str,
        precision: str,
        weights: Collection[int],
        fixed: Collection[int],
        compiled: list[CompiledGraph] | None,
    ):
        self._boxed_call = True
        self.gm, self.kind, self.precision, self.compiled = gm, kind, precision, compiled
        self.weights, self.fixed = weights, fixed
        self.plans: dict[tuple, Callable[..., Any]] = {}

    def __call__(self, args: list) -> list:
        key = tuple((tuple(a.shape), a.stride(), a.dtype, a.device) if isinstance(a, torch.Tensor) else a for a in args)
        plan = self.plans.get(key)
        if plan is None:
            from torch.fx.experimental.proxy_tensor import make_fx

            concrete = make_fx(self.gm, tracing_mode="fake")(*args)
            plan = self.plans[key] = _compile_or_eager(
                concrete, args, self.kind, self.precision, self.weights, self.fixed, self.compiled
            )
        return plan(args)


def aot_compilers(precision: str, compiled: list[CompiledGraph] | None = None, state: int = 0) -> dict[str, Any]:
    """The keyword arguments AOTAutograd takes: fuseforge's forward, backward
    and inference compilers (`state`: see graph_compiler), the min-cut
    partitioner and the decompositions."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    return dict(
        fw_compiler=graph_compiler("forward", precision, compiled, state),
        bw_compiler=graph_compiler("backward", precision, compiled),
        inference_compiler=graph_compiler("inference", precision, compiled, state),
        partition_fn=min_cut_rematerialization_partition,
        decompositions=decomposition_table(training=True),
    )


def aot_dynamo_graph(
    gm: fx.GraphModule, example_inputs: list[Any], precision: str, compiled: list[CompiledGraph] | None = None
) -> Callable[..., Any]:
    """A graph dynamo captured, through AOTAutograd with fuseforge's compilers.
    Where no gradient is recorded (an inference graph), it is traced to the
    ops `optimize`'s capture makes: RNN calls whole, one cuDNN call each
    (their decompositions would unroll every time step; dynamo hands RNN
    modules to a backend only under `torch._dynamo.config.allow_rnn`), and
    instance norm on its input's own shape. A graph recorded for backward
    takes ATen's decompositions, whose gradients autograd knows."""
    from torch._dynamo.backends.common import aot_autograd

    backend = aot_autograd(**aot_compilers(precision, compiled))
    records_grad = torch.is_grad_enabled() and any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs
    )
    if records_grad:
        return backend(gm, example_inputs)
    with opaque_rnns(), own_instance_norm():
        return backend(gm, example_inputs)


class _FlatCall(nn.Module):
    """`model` called with its tensor arguments only (the others fixed), its
    output flattened to a tuple: what aot_module_simplified traces."""

    def __init__(self, model: nn.Module, args: Sequence[Any]):
        super().__init__()
        self.model = model
        self.args = list(args)
        self.tensor_at = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        self.out_spec: pytree.TreeSpec | None = None

    def forward(self, *tensors: torch.Tensor) -> tuple:
        args = list(self.args)
        for i, t in zip(self.tensor_at, tensors):
            args[i] = t
        leaves, self.out_spec = pytree.tree_flatten(self.model(*args))
        return tuple(leaves)


def _state_slots(model: nn.Module) -> list[tuple[dict, str, Any]]:
    """Where the model's submodules, parameters, buffers and plain tensor
    attributes live: (the dict that holds it, its name, the object). Looking each up again is how a
    step notices a replaced parameter or submodule, at a dict lookup apiece."""
    slots: list[tuple[dict, str, Any]] = []
    for m in model.modules():
        for d in (m._modules, m._parameters, m._buffers):
            slots += [(d, name, v) for name, v in d.items()]
        slots += [(m.__dict__, name, v) for name, v in plain_tensors(m)]  # traced as buffers too
    return slots


class TrainingStep:
    """A model's forward for one kind of call (shapes, dtypes, mode, the
    non-tensor arguments' values), differentiable through its compiled
    backward. `graphs` holds the compiled forward and backward plans (the
    backward once the first backward has run: AOTAutograd compiles it then)."""

    def __init__(self, model: nn.Module, args: Sequence[Any], precision: str):
        from torch._functorch.aot_autograd import aot_module_simplified

        self.flat = _FlatCall(model, args)
        self.graphs: list[CompiledGraph] = []
        self.slots = _state_slots(model)
        tensors = [args[i] for i in self.flat.tensor_at]
        # aot_module_simplified takes any module (it calls it functionally
        # with the parameters and buffers as inputs); its annotation names the
        # GraphModule dynamo hands it.
        flat: Any = self.flat
        # A tensor attribute forward writes (a recurrent state) is traced as a
        # buffer: AOTAutograd then lifts the tensor and writes its new value
        # back into it after each forward, as eager's call leaves it.
        with tensor_attributes_as_buffers(model):
            # The forward's first arguments, as aot_module_simplified lifts them.
            state = len(dict(flat.named_parameters(remove_duplicate=False)))
            state += len(dict(flat.named_buffers(remove_duplicate=False)))
            # Under a tracing context of its own (dynamo's, through the
            # backend), AOTAutograd records which saved values it donates to
            # the backward (_donated_inputs).
            context = torch._guards.TracingContext.try_get() or torch._guards.TracingContext(None)
            with torch._guards.tracing(context):
                self.fn = aot_module_simplified(flat, tensors, **aot_compilers(precision, self.graphs, state))
        self.out_spec = self.flat.out_spec

    def applies(self, model: nn.Module) -> bool:
        """Whether the submodules, parameters and buffers traced are still the
        model's own (the compiled step reads the tensors it was traced with:
        a replaced one needs a new trace)."""
        return all(d.get(name) is v for d, name, v in self.slots)

    def __call__(self, args: Sequence[Any]) -> Any:
        outputs = self.fn(*[args[i] for i in self.flat.tensor_at])
        return pytree.tree_unflatten(list(outputs), self.out_spec) if self.out_spec is not None else outputs


class SplitStep:
    """The training step of a model AOTAutograd cannot trace whole (an RNN
    module, data-dependent Python): dynamo splits it where it cannot
    capture, each captured part goes through the fuseforge backend (its own
    compiled forward and backward), the rest runs eagerly. Dynamo guards and
    retraces by itself. A call dynamo cannot run (bad inputs among them:
    eager then raises the model's own error for those) runs eagerly, logged."""

    def __init__(self, model: nn.Module, precision: str):
        self.model = model
        self.fn = torch.compile(model, backend="fuseforge", options={"precision": precision})
        self.graphs: list[CompiledGraph] = []

    def applies(self, model: nn.Module) -> bool:
        return True

    def __call__(self, args: Sequence[Any]) -> Any:
        try:
            return self.fn(*args)
        except Exception as e:  # dynamo's failures have no common type
            log.warning("fuseforge: dynamo could not run %s split (%s); eager", type(self.model).__name__, one_line(e))
            return self.model(*args)


def compile_step(
    model: nn.Module, args: Sequence[Any], precision: str, where: str | None = None
) -> TrainingStep | SplitStep:
    """The training step of `model` for calls like `args`: traced whole when
    AOTAutograd can, else split by dynamo (logged with the reason; `where`
    locates the model's code for it)."""
    try:
        return TrainingStep(model, args, precision)
    except Exception as e:  # AOTAutograd's tracing failures have no common type
        log.warning(
            "fuseforge: %s: the training step does not trace whole (%s); dynamo splits it, "
            "its captured parts compiled, the rest eager",
            type(model).__name__,
            one_line(e, where),
        )
        return SplitStep(model, precision)
