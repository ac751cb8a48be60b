"""One standalone Python file with a `ModelNew` for a model (`fuseforge emit`
writes one per problem file: harness/emit.py loads the problem and calls
`emit_model` here with its source, model and inputs).

The emitted file imports torch (and whatever standard-library modules the
model's source itself imports), never fuseforge. It holds, in this order:

- `CUDA_GRAPHS = True`, the switch for CUDA graphs (see ModelNew below);
- the source that defines `Model`, verbatim (so `Model` is defined exactly as given);
- the generated CUDA kernels (pointwise ones, and GEMM kernels with their
  fused epilogues, which include CUTLASS's headers), each in its own C++
  namespace with a launcher (`cudaLaunchKernel` with the plan's grid, block and
  shared memory), and a C++ host wrapper per kernel that checks the inputs'
  device, dtype and shape, copies an input into the kernel's specialized layout
  if its strides (or, for a GEMM kernel, its alignment) differ, allocates the
  outputs, launches on `at::cuda::getCurrentCUDAStream()` and checks the
  launch; both built with `torch.utils.cpp_extension.load_inline` at the
  first fused call (torch caches the build by the sources' hash). A file with
  GEMM kernels finds CUTLASS's headers in the nvidia-cutlass wheel, as
  fuseforge does; without them its ModelNew runs Model.forward and warns;
- `class ModelNew(Model)`: the same constructor, parameters, buffers and
  state_dict keys as `Model`. Its forward runs the plan of the current mode
  (one plan per mode in `modes`, captured here with the example inputs),
  through functions forward.py writes per plan and the runtime that
  emit/dispatch.py holds (copied in verbatim):
  - the plain path: the guard, the prepare section's values (what depends
    only on weights) kept between calls and computed again when a weight
    they read changes (in place, replaced or reloaded: `cached_prepare`,
    copied here from fuseforge.runtime.prepared), then the run section:
    library steps as torch calls, kernels through the extension (a run of
    consecutive launches in one C++ call), buffer updates (train-mode
    BatchNorm statistics) copied back. Parameters and buffers are read from
    the module at each call; constants are made once per device;
  - CUDA graphs: the third plain call with the same kind of inputs (device,
    scalar arguments) captures the run section, buffer updates included, as
    a CUDA graph on a side stream, with static input tensors the caller's
    are copied into; it is kept if a call with it times no slower than a
    plain call (the timing runs' buffer updates and random draws undone).
    A later call replays it on the current stream and returns clones of its
    outputs, while the module's parameters and buffers are the tensors, in
    the storage, it was captured at (in-place changes are read where they
    are; prepared values computed again are copied into the graph's);
    otherwise it captures again (at most three times). A capture that fails
    leaves those inputs on the plain path, warning once.
    `CUDA_GRAPHS` at the top of the file (True, as written: where faster;
    False: none; "always": untimed) and FUSEFORGE_CUDA_GRAPHS (auto, always, off) choose;
    `_ff_graph_choices(model)` says what each kind of inputs got.
  It runs plain `Model.forward` instead when the mode has no plan, when the
  inputs' or state's shapes, dtypes or devices differ from the emitted
  ones, or when autograd needs a graph (grad mode on and a parameter or
  input requires grad), warning once per reason.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

import torch

from fuseforge.emit import dispatch
from fuseforge.emit.cuda import cuda_sources, segment_host, segments
from fuseforge.emit.forward import ModePlan, forward_code
from fuseforge.emit.ops import EmitError
from fuseforge.runtime import library_calls
from fuseforge.runtime.cutlass_headers import cutlass_include_dir
from fuseforge.runtime.options import ENV_CUDA_GRAPHS
from fuseforge.runtime.prepared import cached_prepare

__all__ = ["EmitError", "check_source", "emit_model"]


def check_source(source: str, path: str) -> None:
    """Raises EmitError unless `source` defines `Model` at its top level and
    imports only torch and the standard library (`path` names it)."""
    tree = ast.parse(source)
    defined: set[str] = set()
    node: ast.AST  # top-level statements first, then every node
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
    if "Model" not in defined:
        raise EmitError(f"{path} does not define Model: ModelNew derives from it")
    for node in ast.walk(tree):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        for n in names:
            top = n.split(".")[0]
            if top != "torch" and top not in sys.stdlib_module_names:
                raise EmitError(
                    f"{path} imports {n!r}: the emitted file may import only torch and the standard library"
                )


def _identifier(s: str) -> str:
    return re.sub(r"\W", "_", s)


def _capture_modes(
    model: torch.nn.Module, inputs: list, modes: Sequence[str], name: str, arch: int, precision: str
) -> list[ModePlan]:
    from fuseforge.capture import CaptureError, capture
    from fuseforge.runtime.options import compile_ir

    plans: list[ModePlan] = []
    for mode in modes:
        model.train(mode == "train")
        try:
            captured = capture(model, inputs, name=name)
        except CaptureError as e:
            print(
                f"fuseforge emit: {mode} mode cannot be captured ({e}); ModelNew runs Model.forward in it",
                file=sys.stderr,
            )
            continue
        # The in-process plan: GEMM kernels as the FUSEFORGE_GEMM policy says,
        # each conv's precision as probed on this machine's GPU (none: IEEE).
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        compiled = compile_ir(captured.text, precision, arch, device=device)
        same = next(
            (
                p
                for p in plans
                if p.compiled.ir_after == compiled.ir_after
                and p.captured.input_bindings == captured.input_bindings
                and p.captured.mutations == captured.mutations
            ),
            None,
        )
        if same is not None:
            same.modes.append(mode)
        else:
            plans.append(ModePlan(mode, captured, compiled, [mode]))
    return plans


_MODEL_NEW = '''

class ModelNew(Model):
    """`Model` with its forward through fuseforge's plan ({modes}); see the file's docstring."""

    def forward(self, *args, **kwargs):
        if kwargs:
            bound = inspect.signature(super().forward).bind(*args, **kwargs)
            bound.apply_defaults()
            args = tuple(bound.args)
        mode = "train" if self.training else "eval"
        plan = _FF_PLANS.get(mode)
        if plan is None:
            _ff_warn_once(mode, mode + " mode has no fused plan in this file: running Model.forward")
            return super().forward(*args)
        if _FF_NEEDS_CUTLASS and _FF_CUTLASS_INCLUDE is None:
            _ff_warn_once("cutlass", "its GEMM kernels need CUTLASS's headers (pip install --no-deps "
                                     "nvidia-cutlass==4.2.0.0): running Model.forward")
            return super().forward(*args)
        if not torch.is_grad_enabled():
            out = _ff_call(self, plan, args)
        elif (any(p.requires_grad for p in self.parameters())
              or any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)):
            _ff_warn_once("grad", "gradients are required: running Model.forward so that autograd works "
                                  "(call under torch.no_grad() for the fused kernels)")
            return super().forward(*args)
        else:
            with torch.no_grad():
                out = _ff_call(self, plan, args)
        if isinstance(out, _FFFallback):
            _ff_warn_once(out.key, out.message)
            return super().forward(*args)
        return out
'''

_SUPPORT = '''

_FF_EXT = None
_FF_WARNED = set()
_FF_READY = {}  # device -> whether the kernels run there
_FF_NO_GRAPHS = {}


def _ff_extension():
    """Builds (first call; torch caches the build) and returns the kernels' extension."""
    global _FF_EXT
    if _FF_EXT is None:
        from torch.utils.cpp_extension import load_inline
        flags = ["-std=c++17"] + (["-I" + _FF_CUTLASS_INCLUDE] if _FF_CUTLASS_INCLUDE else [])
        # Hopper GEMM and conv kernels use wgmma, which only the arch-specific sm_90a target has.
        saved = os.environ.get("TORCH_CUDA_ARCH_LIST")
        if _FF_NEEDS_SM90A:
            os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0a"
        try:
            _FF_EXT = load_inline(name=_FF_EXT_NAME, cpp_sources=_FF_CPP_SOURCE, cuda_sources=_FF_CUDA_SOURCE,
                                  functions=_FF_FUNCTIONS, extra_cuda_cflags=flags)
        finally:
            if _FF_NEEDS_SM90A:
                if saved is None:
                    os.environ.pop("TORCH_CUDA_ARCH_LIST")
                else:
                    os.environ["TORCH_CUDA_ARCH_LIST"] = saved
    return _FF_EXT


def _ff_first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def _ff_warn_once(key, message):
    if key not in _FF_WARNED:
        _FF_WARNED.add(key)
        warnings.warn("ModelNew: " + message, stacklevel=3)
'''


def _helper_code() -> list[str]:
    """The helpers step expressions call (library_calls.HELPERS: a conv under its decided fp32_precision)."""
    return [line for f in library_calls.HELPERS for line in ("", inspect.getsource(f).rstrip(), "")]


def _dispatch_code() -> list[str]:
    """The file's per-call runtime: plan records, CUDA graphs (emit/dispatch.py)."""
    return [line for obj in dispatch.EMITTED for line in ("", inspect.getsource(obj).rstrip(), "")]


def _launched(plan: Any) -> list[int]:
    """The indices of the kernels the plan's prepare and run sections launch."""
    return sorted({s.kernel for s in [*plan.prepare, *plan.run] if s.kind == "launch"})


def _cutlass_code(needed: bool) -> list[str]:
    """Where the file's GEMM kernels find CUTLASS's headers (found when the file is imported)."""
    if not needed:
        return ["_FF_NEEDS_CUTLASS = False", "_FF_CUTLASS_INCLUDE = None"]
    return [
        "_FF_NEEDS_CUTLASS = True",
        "",
        "",
        inspect.getsource(cutlass_include_dir).rstrip(),
        "",
        "",
        "_FF_CUTLASS_INCLUDE = cutlass_include_dir()",
    ]


def emit_model(
    model: torch.nn.Module,
    inputs: Sequence[Any],
    source: str,
    *,
    name: str,
    filename: str | None = None,
    modes: Sequence[str] = ("train", "eval"),
    arch: int | None = None,
    precision: str = "fp32",
) -> str:
    """The emitted file's text (see the module docstring) for `model`, an
    instance of the `Model` that `source` defines, with `inputs` its example
    inputs. `name` names the graph and the extension; `filename` (default
    name + ".py") is how messages and the file name the source; `modes`: the
    modes to compile plans for (others run Model.forward); `arch`: the compute
    capability the kernels target (default: target_arch(), this machine's
    GPU's, else 90); `precision`: the numerics policy. Raises EmitError if the
    source defines no Model or imports more than torch and the standard
    library, or if a plan holds something it cannot write out."""
    path = filename or f"{name}.py"
    check_source(source, path)
    if arch is None:
        from fuseforge._native import target_arch

        arch = target_arch()
    plans = _capture_modes(model, list(inputs), modes, type(model).__name__, arch, precision)
    if not plans:
        raise EmitError(f"{path}: no mode in {list(modes)} could be captured; nothing to emit")
    # The kernels the sections launch: not a conv kernel's library-form epilogue
    # (the file always runs the conv kernel; it times nothing against cuDNN).
    fns = [{j: f"k_{p.mode}_{j}" for j in _launched(p.plan)} for p in plans]
    kernels = [(fn[j], p.plan.kernels[j], p.plan) for p, fn in zip(plans, fns) for j in fn]
    segs = [segments(p.plan, f"s_{p.mode}") for p in plans]
    cu, cpp = cuda_sources(kernels)
    cpp += "".join("\n" + segment_host(s, p.plan, fn) for p, fn, ss in zip(plans, fns, segs) for s in ss)
    functions = [name for fn in fns for name in fn.values()] + [s.name for ss in segs for s in ss]
    forwards = [forward_code(mp, fn, ss) for mp, fn, ss in zip(plans, fns, segs)]
    digest = hashlib.sha1((cu + cpp).encode()).hexdigest()[:12]
    table = ", ".join(f"{m!r}: _FF_PLAN_{p.mode}" for p in plans for m in p.modes)
    fallback = [m for m in ("train", "eval") if not any(m in p.modes for p in plans)]
    out = [
        f'"""ModelNew for {name}, written by `fuseforge emit` (do not edit: re-emit).',
        "",
        "Standalone: needs torch (with a CUDA toolkit for load_inline), not fuseforge.",
        f"Fused plans for: {', '.join(m for p in plans for m in p.modes) or 'no mode'}"
        + (f"; Model.forward in {', '.join(fallback)} mode." if fallback else "."),
        f"With CUDA_GRAPHS below True (or {ENV_CUDA_GRAPHS}=auto), the third call with the",
        "same kind of inputs captures the fused kernels as a CUDA graph, kept where",
        "replaying it times faster; =always keeps them untimed, =off (or 0) none.",
        'The source of Model follows verbatim, then the generated code."""',
        "import contextlib",
        "import inspect",
        "import os",
        "import warnings",
        "",
        "import torch",
        "from torch.utils import _pytree as _ff_pytree",
        "",
        "# CUDA graphs: False (none), True (kept for each kind of inputs where a replay",
        '# times faster than the plain call), "always" (every graph that captures, untimed).',
        f"CUDA_GRAPHS = {dispatch.CUDA_GRAPHS!r}",
        f"_FF_CUDA_GRAPHS_VAR = {ENV_CUDA_GRAPHS!r}  # the environment variable that overrides it",
        "",
        f"# ---- {os.path.basename(path)}, verbatim",
        source.rstrip(),
        "",
        "# ---- generated by fuseforge",
        f"_FF_EXT_NAME = {('ff_' + _identifier(name) + '_' + digest)!r}",
        f"_FF_FUNCTIONS = {functions!r}",
        f"_FF_CUDA_SOURCE = r'''{cu}'''",
        f"_FF_CPP_SOURCE = r'''{cpp}'''",
        *_cutlass_code(any(k.cutlass for _, k, _ in kernels)),
        f"_FF_NEEDS_SM90A = {any(k.sm90a for _, k, _ in kernels)}",
        _SUPPORT,
        "",
        inspect.getsource(cached_prepare).rstrip(),
        *_helper_code(),
        *_dispatch_code(),
    ]
    out += ["\n" + f for f in forwards]
    out.append(f"\n_FF_PLANS = {{{table}}}\n")
    out.append(_MODEL_NEW.format(modes=", ".join(m for p in plans for m in p.modes) or "no mode"))
    text = "\n".join(out)
    if "'''" in cu or "'''" in cpp:
        raise EmitError("generated source contains ''' and cannot be quoted")
    ast.parse(text)  # a bug here must not produce a file that fails at import
    return text
