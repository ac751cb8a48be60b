"""How an emitted ModelNew runs a call: writer.py copies `EMITTED` (this
module's classes and functions below the marker) verbatim into every file.
An emitted file imports only torch and the standard library, so this code
names only torch, contextlib, os, warnings, builtins and the file's own
definitions (the placeholders above the marker stand for those here);
annotations naming anything else are strings, never evaluated there.

A call (`_ff_call`, grad mode off) of a plan (`_FFPlan`: the functions
forward.py writes for it) goes one of two ways:

- replay: the call's input signature (its device and scalar arguments, and
  the autocast and matmul precision state library calls read) has a CUDA
  graph (`_FFGraph`), its tensors fit the graph's static inputs, the
  module's parameters and buffers are the very tensors, in the very storage,
  the graph was captured at (their values may have changed in place: the
  graph reads them where they are), and the prepared values are those the
  graph reads (when a weight they depend on changed, prepare runs again and
  its values are copied into the graph's). Then the inputs are copied into
  the static ones, the graph is replayed on the current stream (it includes
  the buffer updates) and its outputs are cloned out;
- plain: the guard, the prepare section (cached_prepare), the run section
  (one C++ call per run of consecutive kernels, library steps as torch
  calls), the buffer updates. The third plain call of a signature captures
  its run section (a signature whose tensors were replaced captures again,
  at most MAX_CAPTURES times), times the plain call against the graph
  (undoing the buffer updates and random draws of the timing runs) and keeps
  the faster; a capture that fails leaves the signature plain with one
  warning.

A call made while the caller captures a CUDA graph of its own takes the
plain path, which that capture records (one graph cannot replay or capture
another inside it).

CUDA_GRAPHS in the file (True, as written: graphs where faster; False:
none; "always": every graph that captures, untimed) and
FUSEFORGE_CUDA_GRAPHS (off or 0: none; auto; always) choose; `_ff_graph_choices(model)` says what each signature got.
"""

import contextlib
import os
import warnings
from collections.abc import Callable
from typing import Any

import torch

from fuseforge.runtime.options import ENV_CUDA_GRAPHS

# ---- the emitted file's own definitions (writer.py writes them there)

#: The file's switch: False, True or "always".
CUDA_GRAPHS: Any = True
_FF_CUDA_GRAPHS_VAR = ENV_CUDA_GRAPHS  # the variable that overrides it
_FF_EXT: Any = None  # the built extension (built by _ff_extension before any graph exists)
_FF_NEEDS_SM90A = False
_FF_READY: dict = {}  # device -> whether its kernels run there
_FF_NO_GRAPHS: dict = {}


def _ff_extension() -> Any:
    raise NotImplementedError("an emitted file defines _ff_extension")


# ---- copied into emitted files (EMITTED)


class _FFPlan:
    """A plan of the file: its generated functions (forward.py) and facts.
    `prepared` is None for a plan without a prepare section; `mutated`: the
    indices in state() of the buffers run() updates; `graphs`: whether the
    run section launches anything a CUDA graph could hold."""

    NOTHING: list = []  # the prepared values of a plan without a prepare section

    def __init__(
        self,
        name: str,
        n_args: int,
        guard: "Callable[..., bool]",
        pick: "Callable[..., Any]",
        state: "Callable[..., list]",
        consts: "Callable[..., list]",
        prepared: "Callable[..., list] | None",
        run: "Callable[..., list]",
        pack: "Callable[[list], Any]",
        mutated: tuple,
        graphs: bool = True,
    ) -> None:
        self.name, self.n_args, self.guard, self.pick, self.state = name, n_args, guard, pick, state
        self.consts, self.prepared, self.run, self.pack, self.mutated = consts, prepared, run, pack, mutated
        self.graphs = graphs
        self.device_consts: dict = {}

    def consts_on(self, dev: "torch.device") -> list:
        """The plan's constant tensors on `dev`, made at its first call there."""
        cs = self.device_consts.get(dev)
        if cs is None:
            cs = self.device_consts[dev] = self.consts(dev)
        return cs

    def prepared_for(self, module: "Any", ext: "Any", dev: "torch.device", st: list, cs: list) -> list:
        return self.NOTHING if self.prepared is None else self.prepared(module, ext, dev, st, cs)


class _FFFallback:
    """Why a call runs Model.forward instead: ModelNew.forward warns once per key."""

    def __init__(self, key: str, message: str) -> None:
        self.key, self.message = key, message


class _FFGraphs(dict):
    """A module's _FFGraph per (plan, signature). A copy (deepcopy, pickle)
    starts empty: graphs hold the original's addresses."""

    MAX_SIGNATURES = 64  # beyond these (say, ever new scalar arguments) calls just run plain

    def __deepcopy__(self, memo: dict) -> "_FFGraphs":
        return _FFGraphs()

    def __reduce__(self) -> "Any":
        return (_FFGraphs, ())


class _FFGraph:
    """One input signature of a plan on a module: its plain calls so far, its
    CUDA graph with the tensors captured at, and `choice` (what it runs and why)."""

    CAPTURE_AFTER = 2  # plain calls before the capture: the first builds the extension, both warm up
    MAX_CAPTURES = 3  # captures (the module's tensors replaced in between) before it stays plain
    MAX_GRAPHS = 8  # graphs per module: each keeps a memory pool of its own
    TIMING_REPS = 5

    def __init__(self, plan: _FFPlan) -> None:
        self.plan = plan
        self.calls = 0
        self.captures = 0
        self.final = False  # plain from now on
        self.choice = "plain: warming up"
        self.graph: Any = None  # (not evaluated: an annotation in a function)
        self.drop()

    def drop(self) -> None:
        """Forgets the graph and the tensors it holds."""
        self.graph = None
        self.static: list = []  # the graph's inputs, which the caller's are copied into
        self.outs: list = []  # its outputs, cloned out after each replay
        self.state: list = []  # the module's tensors it reads, and their addresses
        self.ptrs: list = []
        self.prepared: list = []  # the prepared values it reads (the prepare cache's list)
        self.mutated: list = []  # the buffers it updates

    def takes(self, xs: list) -> bool:
        """Whether tensors `xs` can be copied into the static inputs."""
        for x, s in zip(xs, self.static):
            if not (isinstance(x, torch.Tensor) and x.shape == s.shape and x.dtype == s.dtype and x.device == s.device):
                return False
        return True

    def holds(self, st: list) -> bool:
        """Whether the module's tensors `st` are those captured at (same tensor, same storage)."""
        for t, s, p in zip(st, self.state, self.ptrs):
            if t is not s or t.data_ptr() != p:
                return False
        return True

    def adopt(self, module: "Any", pre: list) -> bool:
        """Whether the graph reads prepared values `pre`: they are the ones it
        was captured with, or (prepare ran again) have the same layouts and
        are copied into those, which the prepare cache then keeps."""
        if pre is self.prepared:
            return True
        if len(pre) != len(self.prepared):
            return False
        for v, s in zip(pre, self.prepared):
            if isinstance(s, torch.Tensor):
                if (s.is_inference() and not torch.is_inference_mode_enabled()) or not (
                    isinstance(v, torch.Tensor)
                    and v.shape == s.shape
                    and v.stride() == s.stride()
                    and v.dtype == s.dtype
                    and v.device == s.device
                ):
                    return False
            elif v != s:  # a number the graph holds as it was
                return False
        for v, s in zip(pre, self.prepared):
            if isinstance(s, torch.Tensor):
                s.copy_(v)
        cache = module.__dict__.get("_ff_prepared_" + self.plan.name)
        if cache is not None and cache.get("values") is pre:
            cache["values"] = self.prepared
        return True

    def replay(self, xs: list) -> "Any":
        for s, x in zip(self.static, xs):
            s.copy_(x)
        self.graph.replay()
        for t in self.mutated:
            # The replay wrote them where no version counter sees; cached_prepare reads it.
            t.copy_(t)  # (no copy: same tensor)
        return self.plan.pack([o.clone() if isinstance(o, torch.Tensor) else o for o in self.outs])

    def plain_call(
        self, module: "Any", xs: list, args: tuple, ext: "Any", dev: "Any", st: list, pre: list, cs: list
    ) -> "Any":
        """This signature's bookkeeping at a plain-path call: its outputs when
        it was captured (or captured again) and replays, else None (the caller
        runs the plain path)."""
        if self.final:
            return None
        if self.graph is not None:  # the module's tensors or the prepared values' layout changed
            self.drop()
            if self.captures >= self.MAX_CAPTURES:
                self.final = True
                self.choice = f"plain: the module's tensors were replaced after {self.captures} captures"
                return None
            return self.capture(module, xs, args, ext, dev, st, pre, cs)
        self.calls += 1
        if self.calls <= self.CAPTURE_AFTER:
            return None
        return self.capture(module, xs, args, ext, dev, st, pre, cs)

    def capture(
        self, module: "Any", xs: list, args: tuple, ext: "Any", dev: "Any", st: list, pre: list, cs: list
    ) -> "Any":
        """Captures the run section and keeps the graph if a call with it
        times no slower than a plain one (untimed where CUDA_GRAPHS is
        "always"). Returns this call's outputs from a replay, or None (the
        caller runs the plain path). What the warm-up and timing runs update
        (buffers, the random generator) is put back first."""
        graphs = module.__dict__.get("_ff_graphs", {})
        if sum(r.graph is not None for r in graphs.values()) >= self.MAX_GRAPHS:
            self.choice = f"plain: the module keeps {self.MAX_GRAPHS} CUDA graphs already"
            return None
        self.captures += 1
        mutated = [st[i] for i in self.plan.mutated]
        saved = [t.clone() for t in mutated]
        rng = torch.cuda.get_rng_state(dev)
        with torch.cuda.device(dev):
            current = torch.cuda.current_stream()
            try:
                self._capture(xs, args, ext, dev, st, pre, cs, mutated)
            except Exception as e:
                torch.cuda.set_stream(current)  # a capture that fails to end leaves its stream current
                self.drop()
                self.final = True
                cause: BaseException = e  # the first error: ending a broken capture raises another
                while cause.__context__ is not None:
                    cause = cause.__context__
                reason = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
                self.choice = "plain: capturing a CUDA graph failed: " + reason
                warnings.warn(
                    "ModelNew: these inputs run the fused kernels without a CUDA graph: capturing one failed ("
                    + reason
                    + ")",
                    stacklevel=6,
                )
            _ff_restore(mutated, saved, rng, dev)
            return None if self.graph is None else self.replay(xs)

    def _capture(
        self, xs: list, args: tuple, ext: "Any", dev: "Any", st: list, pre: list, cs: list, mutated: list
    ) -> None:
        plan = self.plan
        with torch.inference_mode(False):  # copied into at calls in and out of inference mode alike
            static = [torch.empty_like(x).copy_(x) for x in xs]
        current, side = torch.cuda.current_stream(), torch.cuda.Stream()
        side.wait_stream(current)
        with torch.cuda.stream(side):  # a warm-up on the capture's stream: its library handles and workspaces
            plan.run(ext, dev, static, args, st, pre, cs)
        current.wait_stream(side)
        graph, pool = torch.cuda.CUDAGraph(), torch.cuda.graph_pool_handle()
        try:
            with torch.cuda.graph(graph, pool=pool, stream=side, capture_error_mode="thread_local"):
                outs = plan.run(ext, dev, static, args, st, pre, cs)
        except Exception:
            try:
                graph.pool()  # the capture ended: the graph gives its pool back
            except RuntimeError:
                _ff_close_pool(dev, pool)
            raise
        mine = {t.untyped_storage().data_ptr() for t in [*static, *st, *pre, *cs] if isinstance(t, torch.Tensor)}
        seen: set = set()
        for o in outs:
            p = o.untyped_storage().data_ptr() if isinstance(o, torch.Tensor) else 0
            if p and (p in mine or p in seen):
                # Cloned out, it would no longer be the input, buffer or other output it views, as eager's is.
                self.final = True
                self.choice = "plain: an output shares memory with an input, the module's state or another output"
                return
            seen.add(p)
        self.graph, self.static, self.outs, self.mutated = graph, static, outs, mutated
        self.state, self.ptrs, self.prepared = list(st), [t.data_ptr() for t in st], pre
        if _ff_graphs_setting() == "always":
            self.choice = "graph (CUDA_GRAPHS is 'always': untimed)"
            return
        plain = _ff_time_ms(lambda: plan.run(ext, dev, xs, args, st, pre, cs), self.TIMING_REPS)
        graphed = _ff_time_ms(lambda: self.replay(xs), self.TIMING_REPS)
        if graphed > plain:
            self.drop()
            self.final = True
            self.choice = f"plain: {plain:.4f} ms a call, {graphed:.4f} ms with a CUDA graph"
        else:
            self.choice = f"graph: {graphed:.4f} ms a call, {plain:.4f} ms without"


def _ff_close_pool(dev: "Any", pool: "Any") -> None:
    """Ends a capture's memory pool that torch leaves open when ending the
    capture failed (else every later allocation still asks whether it
    belongs to it). Torch's own calls for it are private: where they are
    missing or refuse, the pool stays."""
    for name in ("_cuda_endAllocateToPool", "_cuda_releasePool"):
        with contextlib.suppress(Exception):
            getattr(torch._C, name)(dev.index, pool)


def _ff_restore(mutated: list, saved: list, rng: "torch.Tensor", dev: "Any") -> None:
    """Undoes what a capture's warm-up and timing runs did: buffer updates, random draws."""
    for t, s in zip(mutated, saved):
        t.copy_(s)
    torch.cuda.set_rng_state(rng, dev)


def _ff_time_ms(fn: "Callable[[], Any]", reps: int, calls: int = 3) -> float:
    """Milliseconds a call of fn() takes in a run of `calls` on the current
    stream (the host's time where the GPU waits for it, else the GPU's),
    the median of `reps` runs."""
    fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return sorted(times)[len(times) // 2]


def _ff_graphs_setting() -> "Any":
    """CUDA_GRAPHS (False, True or "always"), unless FUSEFORGE_CUDA_GRAPHS says off (or 0), auto or always."""
    env = os.environ.get(_FF_CUDA_GRAPHS_VAR)
    if env in ("0", "off"):
        return False
    return {"auto": True, "always": "always"}.get(env or "", CUDA_GRAPHS)


def _ff_context() -> tuple:
    """What the run section's library calls take from torch's global state,
    which a graph keeps as captured: autocast's dtype (None: off), the f32
    matmul precision."""
    autocast = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else None
    return autocast, torch.get_float32_matmul_precision()


def _ff_device_ready(dev: "torch.device") -> bool:
    """Whether the file's kernels run on `dev` (Hopper's wgmma kernels: sm_90a only)."""
    ready = _FF_READY.get(dev)
    if ready is None:
        ready = _FF_READY[dev] = not _FF_NEEDS_SM90A or torch.cuda.get_device_capability(dev) == (9, 0)
    return ready


def _ff_capturing() -> bool:
    """Whether the caller is capturing a CUDA graph of its own: one cannot
    replay or capture another within it, so the plain path runs (and is
    captured into the caller's)."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _ff_call(module: "Any", plan: _FFPlan, args: tuple) -> "Any":
    """`plan`'s outputs for `args` (grad mode off), or a _FFFallback: a
    signature with a graph replays it where the graph still applies (see the
    docstring of fuseforge.emit.dispatch), any other call runs plain."""
    if len(args) == plan.n_args:
        picked = plan.pick(module, args)
        if picked is not None:
            rec = module.__dict__.get("_ff_graphs", _FF_NO_GRAPHS).get((plan.name, picked[1], _ff_context()))
            if rec is not None and rec.graph is not None and _ff_graphs_setting() and not _ff_capturing():
                st = plan.state(module)
                if rec.takes(picked[0]) and rec.holds(st):
                    dev = picked[1][0]
                    if rec.adopt(module, plan.prepared_for(module, _FF_EXT, dev, st, plan.consts_on(dev))):
                        return rec.replay(picked[0])
    return _ff_plain(module, plan, args)


def _ff_plain(module: "Any", plan: _FFPlan, args: tuple) -> "Any":
    """The plain path: guard, prepare section, run section (see _ff_call)."""
    picked = plan.pick(module, args) if plan.guard(module, args) else None
    if picked is None:
        return _FFFallback(
            plan.name,
            "inputs or state differ from those ModelNew was emitted for (shapes, dtypes, CUDA): running Model.forward",
        )
    (xs, key), dev = picked, picked[1][0]
    if not _ff_device_ready(dev):
        return _FFFallback("sm90a", "its wgmma kernels are built for Hopper GPUs (sm_90a): running Model.forward")
    ext = _ff_extension()
    st = plan.state(module)
    cs = plan.consts_on(dev)
    pre = plan.prepared_for(module, ext, dev, st, cs)
    if plan.graphs and _ff_graphs_setting() and not _ff_capturing():
        graphs = module.__dict__.get("_ff_graphs")
        if graphs is None:
            graphs = module.__dict__["_ff_graphs"] = _FFGraphs()
        signature = (plan.name, key, _ff_context())
        rec = graphs.get(signature)
        if rec is None and len(graphs) < graphs.MAX_SIGNATURES:
            rec = graphs[signature] = _FFGraph(plan)
        if rec is not None:
            out = rec.plain_call(module, xs, args, ext, dev, st, pre, cs)
            if out is not None:
                return out
    return plan.pack(plan.run(ext, dev, xs, args, st, pre, cs))


def _ff_graph_choices(module: "Any") -> dict:
    """What each input signature a module has been called with runs: "graph: ..." or "plain: ..." and why."""
    graphs = module.__dict__.get("_ff_graphs", {})
    return {" ".join(map(str, signature)): rec.choice for signature, rec in graphs.items()}


#: What writer.py copies into every emitted file, in order.
EMITTED: list[Any] = [
    _FFPlan,
    _FFFallback,
    _FFGraphs,
    _FFGraph,
    _ff_close_pool,
    _ff_restore,
    _ff_time_ms,
    _ff_graphs_setting,
    _ff_context,
    _ff_device_ready,
    _ff_capturing,
    _ff_call,
    _ff_plain,
    _ff_graph_choices,
]
