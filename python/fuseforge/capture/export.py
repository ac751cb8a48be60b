"""capture(): torch.export (non-strict), the core-ATen decompositions, and the
lowering; Python numbers become ``scalar`` inputs where they can.

Python numbers passed to ``forward`` become ``scalar`` graph inputs when they
can be traced as 0-d tensors with the types eager PyTorch gives them; otherwise
their values are baked into the graph and listed in
``CapturedGraph.specialized_scalars`` so that callers can guard on them.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import io
import logging
import re
import sys
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, cast

import torch
import torch.fx as fx
from torch import nn
from torch.fx.experimental import proxy_tensor
from torch.utils import _pytree as pytree

from fuseforge import phases
from fuseforge.capture.conv_strides import faithful_conv_strides
from fuseforge.capture.decompositions import run_decompositions
from fuseforge.capture.graph import CapturedGraph, CaptureError
from fuseforge.capture.lowering import Lowerer
from fuseforge.capture.rnn_ops import opaque_rnns, restore_aten_targets
from fuseforge.capture.tensor_attributes import WRITTEN, tensor_attributes_as_buffers


@contextlib.contextmanager
def _lstm_shape_fix() -> Iterator[None]:
    """Fixes the hidden-state shapes that PyTorch's LSTM decomposition reports
    while tracing (pytorch#151200: `one_layer_lstm` returns [1, B, H] per layer,
    so h_n/c_n are traced as [L, 1, B, H] instead of [L, B, H])."""
    try:
        from torch._decomp import decompositions as D

        orig = D.one_layer_lstm
    except Exception:  # the private helper moved: nothing to patch
        yield
        return

    def fixed(*args: Any, **kwargs: Any) -> Any:
        out, (h, c) = orig(*args, **kwargs)
        if h.dim() == 3:
            h = h.squeeze(0)
        if c.dim() == 3:
            c = c.squeeze(0)
        return out, (h, c)

    D.one_layer_lstm = fixed
    try:
        yield
    finally:
        D.one_layer_lstm = orig


@contextlib.contextmanager
def _agreeing_cudnn_tf32_flags() -> Iterator[None]:
    """torch.export reads the legacy cudnn.allow_tf32 switch, which raises once
    the new per-op flags disagree with it (a user who set only
    cudnn.conv.fp32_precision = "ieee"). Tracing runs no cuDNN kernel: the
    legacy switch makes the flags agree meanwhile, and the conv and RNN flags
    come back after (the switch itself is then unreadable as before)."""
    cudnn = torch.backends.cudnn
    try:
        _ = cudnn.allow_tf32  # raises where the legacy switch is unreadable
    except RuntimeError:
        pass
    else:
        yield
        return
    # conv and rnn are attributes of the module class torch swaps in at import
    # (PropModule), which its stubs do not show.
    saved = cudnn.conv.fp32_precision, cudnn.rnn.fp32_precision  # type: ignore[attr-defined]
    cudnn.allow_tf32 = saved[0] == "tf32"
    try:
        yield
    finally:
        cudnn.conv.fp32_precision, cudnn.rnn.fp32_precision = saved  # type: ignore[attr-defined]


@contextlib.contextmanager
def _no_hooks_left_on_failure() -> Iterator[None]:
    """Removes the global buffer-registration hooks a failed trace left behind.
    Non-strict export (and run_decompositions' re-trace) installs one that
    closes over the module being traced and removes it only when tracing
    succeeds (pytorch#172213). Left in place, it keeps the model (and the
    plans it reaches) alive for the rest of the process, and the model's next
    buffer assignment in eager, the fallback for inputs capture rejects,
    fails its tracing-only check ("expected FakeTensor")."""
    hooks = getattr(torch.nn.modules.module, "_global_buffer_registration_hooks", None)
    before = set(hooks) if hooks is not None else set()
    try:
        yield
    except BaseException:
        if hooks is not None:
            for key in [k for k in hooks if k not in before]:
                del hooks[key]
        raise


@contextlib.contextmanager
def _stack_traces(record: bool) -> Iterator[None]:
    """Whether non-strict export's tracer records each node's stack trace
    (node.meta["stack_trace"]). It always does, and extracting and formatting
    a traceback per traced op is about a sixth of export's time (on a 2-core
    CPU a 160-step GRU loop's export took 2.5 s with them and 2.1 without, a
    DenseNet-201's 2.0 and 1.7); the lowering reads them only to say where an
    error's node came from."""
    tracer = getattr(proxy_tensor, "_ModuleStackTracer", None)
    if record or tracer is None:
        yield
        return
    init = tracer.__init__

    def without_traces(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.record_stack_traces = False

    tracer.__init__ = without_traces
    try:
        yield
    finally:
        tracer.__init__ = init


def _trace(model: nn.Module, args: tuple, printed: io.StringIO) -> tuple[torch.export.ExportedProgram, bool]:
    """torch.export of the model, and whether it wrote a plain tensor
    attribute (tensor_attributes.WRITTEN: warned of, or refused)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            with contextlib.redirect_stderr(printed), opaque_rnns(), phases.timed("capture: export"):
                ep = torch.export.export(model, args, strict=False)
        except Exception as e:
            if any(w in str(e) for w in WRITTEN):
                return cast(torch.export.ExportedProgram, None), True
            error = CaptureError(f"torch.export failed: {type(e).__name__}: {e}")
            error.details = printed.getvalue()
            raise error from e
    written = False
    for w in seen:
        if any(text in str(w.message) for text in WRITTEN):
            written = True
        elif "isinstance(treespec, LeafSpec)" not in str(w.message):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return ep, written


def _export(model: nn.Module, args: tuple, stack_traces: bool) -> torch.export.ExportedProgram:
    # Stack traces off for the decompositions' traces too: theirs would name torch's code, not the user's.
    with _lstm_shape_fix(), _agreeing_cudnn_tf32_flags(), _no_hooks_left_on_failure(), _stack_traces(stack_traces):
        printed = io.StringIO()  # a failing export prints the partial graph to stderr
        ep, written = _trace(model, args, printed)
        if written:  # traced again with the written attributes as buffers
            printed = io.StringIO()
            with tensor_attributes_as_buffers(model):
                ep, written = _trace(model, args, printed)
            if written:
                raise CaptureError("forward writes a tensor attribute that fuseforge cannot carry as state")
        sys.stderr.write(printed.getvalue())
        try:
            with phases.timed("capture: decompositions"):
                ep = run_decompositions(ep)
        except Exception as e:
            raise CaptureError(f"run_decompositions failed: {type(e).__name__}: {e}") from e
        faithful_conv_strides(ep)  # before the RNN stand-ins go: their fake kernels are cheap
        restore_aten_targets(ep.graph)
        return ep


@contextlib.contextmanager
def _quiet_torch_logs() -> Iterator[None]:
    """Silences torch's logs and stderr (export prints the partial graph of a
    failed trace there) while a speculative export (scalars traced as tensors)
    may fail; the fallback export reports real problems."""
    loggers = [
        logging.getLogger(n)
        for n in ("torch", "torch.fx.experimental.symbolic_shapes", "torch._dynamo", "torch.export", "torch._export")
    ]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        for lg, lv in zip(loggers, levels):
            lg.setLevel(lv)


def _is_py_scalar(x: Any) -> bool:
    return isinstance(x, (bool, int, float)) and not isinstance(x, torch.Tensor)


def _scalar_dtype(x: Any) -> torch.dtype:
    if isinstance(x, bool):
        return torch.bool
    if isinstance(x, int):
        return torch.int64
    return torch.float64


def _forward_names(model: nn.Module, n: int) -> list[str]:
    names: list[str] = []
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        params = []
    var = None
    for p in params:
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.append(p.name)
        elif p.kind == p.VAR_POSITIONAL:
            var = p.name
            break
    while len(names) < n:
        names.append(f"{var or 'arg'}_{len(names)}")
    return names[:n]


def _scalar_types_match_eager(ep: torch.export.ExportedProgram, scalar_names: set[str]) -> bool:
    """Whether the ops that combine a lifted scalar (a 0-d tensor now) with other
    tensors give the dtypes eager gives with a Python number there. A 0-d f64
    tensor times an i32 tensor is f64 where a Python float gives f32."""
    derived: set[fx.Node] = {n for n in ep.graph.nodes if n.op == "placeholder" and n.name in scalar_names}
    if not derived:
        return True
    for node in ep.graph.nodes:
        if node.op != "call_function":
            continue
        flat = [x for x in pytree.tree_leaves((node.args, node.kwargs)) if isinstance(x, fx.Node)]
        if not any(x in derived for x in flat):
            continue
        val = node.meta.get("val")
        if all(x in derived for x in flat):
            if isinstance(val, torch.Tensor) and val.dim() == 0:
                derived.add(node)  # arithmetic among scalars: still a Python number in eager
                continue
            return False
        if not isinstance(node.target, torch._ops.OpOverload):
            return False
        if not node.target._schema.returns:
            continue  # a run-time assertion

        def conv(x: Any) -> Any:
            if isinstance(x, fx.Node):
                v: Any = x.meta.get("val")
                if x in derived:
                    return True if v.dtype == torch.bool else (1 if not v.dtype.is_floating_point else 1.0)
                if isinstance(v, torch.Tensor):
                    return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
                return v
            return x

        args = pytree.tree_map(conv, node.args)
        kwargs = pytree.tree_map(conv, node.kwargs)
        out = None
        for fn in (node.target, node.target.overloadpacket):
            try:
                out = fn(*args, **kwargs)
                break
            except Exception:
                continue
        if out is None:
            return False
        outs = out if isinstance(out, (list, tuple)) else [out]
        vals = val if isinstance(val, (list, tuple)) else [val]
        if len(outs) != len(vals):
            return False
        for o, v in zip(outs, vals):
            if isinstance(v, torch.Tensor) and (
                not isinstance(o, torch.Tensor) or o.dtype != v.dtype or tuple(o.shape) != tuple(v.shape)
            ):
                return False
    return True


def _sanitize_graph_name(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_]", "_", str(name))
    if not s:
        return "main"
    if s[0].isdigit():
        s = "_" + s
    return s


def _attempt(
    model: nn.Module, args: list[Any], lift: set[int], graph_name: str, stack_traces: bool = False
) -> CapturedGraph:
    export_args = [torch.tensor(a, dtype=_scalar_dtype(a)) if i in lift else a for i, a in enumerate(args)]
    ep = _export(model, tuple(export_args), stack_traces)
    names = _forward_names(model, len(args))
    if lift:
        if not _scalar_types_match_eager(ep, _lifted_placeholder_names(ep, export_args, lift)):
            raise CaptureError("a lifted scalar changes type promotion")

    user_leaves: list[tuple[str, str, str | int] | None] = []
    specialized: dict[int, Any] = {}
    flat, _ = pytree.tree_flatten_with_path(tuple(export_args))
    for path, leaf in flat:
        top = cast(pytree.SequenceKey, path[0]).idx  # an index into the argument tuple
        if isinstance(leaf, torch.Tensor):
            if len(path) == 1:
                user_leaves.append((names[top], "scalar" if top in lift else "user", top))
            else:
                sub = pytree.keystr(path[1:])
                user_leaves.append((names[top] + re.sub(r"\W+", "_", sub).rstrip("_"), "user", pytree.keystr(path)))
        else:
            user_leaves.append(None)
    # every non-tensor forward argument is baked into the graph
    for i, a in enumerate(args):
        if i not in lift and not isinstance(a, torch.Tensor) and not _contains_tensor(a):
            specialized[i] = a

    try:
        with phases.timed("capture: lowering"):
            lowered = Lowerer(ep, graph_name, user_leaves).run()
    except CaptureError as e:
        if stack_traces or not e.wants_source_line:
            raise
        return _attempt(model, args, lift, graph_name, stack_traces=True)  # to say where the node came from
    return CapturedGraph(
        text=lowered["text"],
        input_bindings=lowered["input_bindings"],
        output_names=lowered["output_names"],
        output_tree=ep.call_spec.out_spec,
        mutations=lowered["mutations"],
        constants=lowered["constants"],
        specialized_scalars=specialized,
        output_constants=lowered["output_constants"],
        opaque_targets=lowered["opaque_targets"],
    )


def _contains_tensor(x: Any) -> bool:
    return any(isinstance(leaf, torch.Tensor) for leaf in pytree.tree_leaves(x))


def _lifted_placeholder_names(ep: torch.export.ExportedProgram, export_args: list[Any], lift: set[int]) -> set[str]:
    """Placeholder names of the lifted scalars (user inputs are flattened in order)."""
    flat, _ = pytree.tree_flatten_with_path(tuple(export_args))
    user_specs = [s for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    out = set()
    for (path, _leaf), spec in zip(flat, user_specs):
        if len(path) == 1 and cast(pytree.SequenceKey, path[0]).idx in lift and hasattr(spec.arg, "name"):
            out.add(spec.arg.name)
    return out


@contextlib.contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Pauses the cyclic garbage collector. Tracing allocates objects fast
    enough to set off full collections, each of which walks every object torch
    has loaded: 0.17 s apiece on the CPU machine, most of a cached compile.
    Garbage from the trace is collected once the collector runs again."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def capture(model: nn.Module, example_inputs: Sequence[Any], name: str = "main") -> CapturedGraph:
    """Traces `model(*example_inputs)` and returns its IR text and bindings.

    The model's `training` flag decides between the train graph (batch
    statistics, buffer write-backs as `mutate` lines) and the eval graph. Raises
    CaptureError when the model cannot be traced or uses something the IR
    cannot express (dtypes other than f32/f16/bf16/f64/i64/i32/bool, dynamic
    shapes, in-place writes to forward's inputs).
    """
    if not isinstance(model, nn.Module):
        raise CaptureError(f"capture takes an nn.Module, got {type(model).__name__}")
    with _no_cyclic_gc():
        return _capture(model, list(example_inputs), name)


def _capture(model: nn.Module, args: list[Any], name: str) -> CapturedGraph:
    graph_name = _sanitize_graph_name(name)
    scalars = [i for i, a in enumerate(args) if _is_py_scalar(a)]
    if not scalars:
        return _attempt(model, args, set(), graph_name)
    try:
        with _quiet_torch_logs():
            return _attempt(model, args, set(scalars), graph_name)
    except Exception:
        pass
    # Lift scalars one at a time, keeping those that trace as tensors.
    lifted: set[int] = set()
    best: CapturedGraph | None = None
    if len(scalars) > 1:
        for i in scalars:
            try:
                with _quiet_torch_logs():
                    best = _attempt(model, args, lifted | {i}, graph_name)
                lifted.add(i)
            except Exception:
                continue
    if best is not None and lifted:
        if best.specialized_scalars.keys() & lifted:
            raise CaptureError("internal: lifted scalar reported as specialized")
        # `best` came from the last successful attempt, which used all of `lifted`.
        return best
    return _attempt(model, args, set(), graph_name)
