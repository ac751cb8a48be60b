"""The per-call runtime an emitted file carries (emit/dispatch.py, copied in
verbatim), run from an emitted file on the CPU: a plan of CPU functions
stands in for the generated ones, and CPU stand-ins for the CUDA calls of a
capture (a "capture" hands back the work a replay runs), so when to capture,
replay, capture again or stay plain, the checks before a replay, the timed
choice and what a capture puts back run as they do in a file."""

import contextlib
import copy
import importlib.util
import warnings

import pytest
import torch

from conftest import TINY_PROBLEM
from fuseforge.harness.emit import emit_problem


@pytest.fixture(scope="module")
def emitted_file(tmp_path_factory):
    out = tmp_path_factory.mktemp("dispatch")
    (out / "tiny.py").write_text(TINY_PROBLEM.format(prelude="", init="pass"))
    (out / "tiny_new.py").write_text(emit_problem(out / "tiny.py"))
    return out / "tiny_new.py"


class _Counted(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.full((4,), 2.0), requires_grad=False)
        self.register_buffer("count", torch.zeros(()))


class _Cuda:
    """CPU stand-ins for the torch.cuda calls of a capture. While a capture
    is under way (`capturing`), the plan's run hands its work to the graph
    instead of doing it, as a stream capture records; elapsed times come
    from `times` (a list, consumed in order)."""

    def __init__(self, monkeypatch):
        self.capturing = None
        self.times: list = []
        self.streams_set: list = []
        self.pools_closed: list = []
        cuda = self

        class Graph:
            def __init__(self):
                self.work, self.replays, self.ended = None, 0, False

            def replay(self):
                self.replays += 1
                self.work()

            def pool(self):
                if not self.ended:
                    raise RuntimeError("Called CUDAGraph::pool() without a preceding successful capture.")
                return (0, 1)

        @contextlib.contextmanager
        def graph(g, pool=None, stream=None, capture_error_mode="global"):
            assert capture_error_mode == "thread_local" and stream is not None and pool == (0, 1)
            cuda.capturing = g
            try:
                yield
            except Exception:  # as torch's: ending a capture that broke raises too
                raise RuntimeError("CUDA error: operation failed due to a previous error during capture") from None
            finally:
                cuda.capturing = None
            g.ended = True

        class Stream:
            def wait_stream(self, other):
                pass

            def synchronize(self):
                pass

        class Event:
            def __init__(self, enable_timing=False):
                pass

            def record(self):
                pass

            def synchronize(self):
                pass

            def elapsed_time(self, end):
                return cuda.times.pop(0)

        current = Stream()
        patches = {
            "CUDAGraph": Graph,
            "graph": graph,
            "graph_pool_handle": lambda: (0, 1),
            "Stream": Stream,
            "Event": Event,
            "current_stream": lambda device=None: current,
            "stream": lambda s: contextlib.nullcontext(),
            "device": lambda d: contextlib.nullcontext(),
            "set_stream": self.streams_set.append,
            "get_rng_state": lambda device="cuda": torch.get_rng_state(),
            "set_rng_state": lambda state, device="cuda": torch.set_rng_state(state),
        }
        for name, value in patches.items():
            monkeypatch.setattr(torch.cuda, name, value)
        for name in ("_cuda_endAllocateToPool", "_cuda_releasePool"):
            monkeypatch.setattr(
                torch._C, name, lambda dev, pool, name=name: self.pools_closed.append(name), raising=False
            )


def _runtime(path, monkeypatch, fail=None):
    """The emitted file's runtime with a CPU plan: out = x * w + w.sum() *
    scale (w.sum() the prepared value), count += 1 and a random draw as its
    buffer update; `fail`: what its run raises under capture."""
    spec = importlib.util.spec_from_file_location("emitted_runtime_cpu", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "_ff_extension", lambda: None)
    monkeypatch.setattr(mod, "_ff_device_ready", lambda dev: True)
    monkeypatch.delenv("FUSEFORGE_CUDA_GRAPHS", raising=False)
    monkeypatch.setattr(mod, "CUDA_GRAPHS", True)
    cuda = _Cuda(monkeypatch)

    def run(ext, dev, xs, args, st, pre, cs):
        def work():
            st[1].data.add_(1 + 0 * torch.rand(()))  # as a graph writes it: no version counter moves
            return [xs[0] * st[0] + pre[0] * args[1]]

        if cuda.capturing is None:
            return work()
        if fail is not None:
            raise fail
        outs = [torch.empty(4)]
        cuda.capturing.work = lambda: outs[0].copy_(work()[0])
        return outs

    def prepared(self, ext, dev, st, cs):
        return mod.cached_prepare(self.__dict__.setdefault("_ff_prepared_cpu", {}), [st[0]], lambda: [st[0].sum()])

    plan = mod._FFPlan(
        "cpu",
        2,
        lambda self, args: isinstance(args[0], torch.Tensor) and args[0].shape == (4,),
        lambda self, args: ([args[0]], (args[0].device, type(args[1]), args[1])),
        lambda self: [self.w, self.count],
        lambda dev: [],
        prepared,
        run,
        lambda outs: outs[0],
        (1,),
    )
    return mod, plan, cuda


def _want(m, x, scale=3.0):
    return x * m.w + m.w.sum() * scale


def test_replays_after_two_plain_calls_and_captures_again_for_replaced_weights(emitted_file, monkeypatch):
    mod, plan, cuda = _runtime(emitted_file, monkeypatch)
    mod.CUDA_GRAPHS = "always"
    m = _Counted()
    x = [torch.arange(4.0) + i for i in range(8)]
    torch.manual_seed(0)
    outs = [mod._ff_call(m, plan, (x[i], 3.0)) for i in range(4)]  # plain, plain, capture, replay
    (rec,) = m._ff_graphs.values()
    assert rec.captures == 1 and rec.graph.replays == 2 and float(m.count) == 4, rec.choice  # one update a call
    drawn = torch.get_rng_state()
    torch.manual_seed(0)
    torch.rand(4)
    assert torch.equal(drawn, torch.get_rng_state())  # one draw a call: the warm-up's is undone
    for i, o in enumerate(outs):
        assert torch.equal(o, _want(m, x[i])), i  # clones: a later call leaves them be
    # An in-place change is read where it is; the prepared value computed
    # again is copied into the graph's, which the prepare cache then keeps.
    with torch.no_grad():
        m.w.mul_(2)
    version = m.count._version
    assert torch.equal(mod._ff_call(m, plan, (x[4], 3.0)), _want(m, x[4]))
    assert rec.captures == 1 and rec.graph.replays == 3 and m._ff_prepared_cpu["values"] is rec.prepared
    assert m.count._version > version  # cached_prepare sees what a replay updated
    # Another scalar argument is another signature, plain until captured.
    assert torch.equal(mod._ff_call(m, plan, (x[5], 5.0)), _want(m, x[5], 5.0)) and len(m._ff_graphs) == 2
    # A replaced weight: captured again, MAX_CAPTURES times in all, then plain.
    for _ in range(mod._FFGraph.MAX_CAPTURES):
        m.w = torch.nn.Parameter(m.w.detach() + 1, requires_grad=False)
        assert torch.equal(mod._ff_call(m, plan, (x[6], 3.0)), _want(m, x[6]))
    assert rec.captures == mod._FFGraph.MAX_CAPTURES and rec.final and rec.graph is None, rec.choice
    assert sum("replaced" in choice for choice in mod._ff_graph_choices(m).values()) == 1
    assert isinstance(mod._ff_call(m, plan, (torch.ones(3), 3.0)), mod._FFFallback)  # the guard fails
    assert copy.deepcopy(m)._ff_graphs == {}  # a copy's graphs would hold the original's addresses
    assert not cuda.streams_set and not cuda.pools_closed


@pytest.mark.parametrize("plain_ms, graph_ms", [(3.0, 1.5), (1.5, 3.0)])
def test_the_timed_choice_keeps_the_faster_and_undoes_its_runs(emitted_file, monkeypatch, plain_ms, graph_ms):
    mod, plan, cuda = _runtime(emitted_file, monkeypatch)
    reps = mod._FFGraph.TIMING_REPS
    cuda.times = [plain_ms] * reps + [graph_ms] * reps  # a run of three calls each
    m = _Counted()
    x = torch.arange(4.0)
    torch.manual_seed(0)
    outs = [mod._ff_call(m, plan, (x, 3.0)) for _ in range(4)]
    (rec,) = m._ff_graphs.values()
    assert not cuda.times and float(m.count) == 4  # the warm-up and timing runs' updates are undone
    drawn = torch.get_rng_state()
    torch.manual_seed(0)
    torch.rand(4)
    assert torch.equal(drawn, torch.get_rng_state())  # and their random draws
    assert all(torch.equal(o, _want(m, x)) for o in outs)
    if graph_ms < plain_ms:
        assert rec.graph is not None and rec.choice == "graph: 0.5000 ms a call, 1.0000 ms without"
    else:
        assert rec.graph is None and rec.final and rec.choice == "plain: 0.5000 ms a call, 1.0000 ms with a CUDA graph"


def test_a_failed_capture_stays_plain_with_one_warning(emitted_file, monkeypatch):
    reason = RuntimeError("CUDA error: operation not permitted when stream is capturing")
    mod, plan, cuda = _runtime(emitted_file, monkeypatch, fail=reason)
    m = _Counted()
    x = torch.arange(4.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = [mod._ff_call(m, plan, (x, 3.0)) for _ in range(5)]
    assert [str(w.message) for w in caught] == [
        "ModelNew: these inputs run the fused kernels without a CUDA graph: capturing one failed "
        "(CUDA error: operation not permitted when stream is capturing)"
    ]
    (rec,) = m._ff_graphs.values()
    assert rec.final and rec.graph is None and rec.choice.startswith("plain: capturing a CUDA graph failed: CUDA error")
    assert float(m.count) == 5 and all(torch.equal(o, _want(m, x)) for o in outs)
    assert len(cuda.streams_set) == 1  # the stream current before the capture is current again
    assert cuda.pools_closed == ["_cuda_endAllocateToPool", "_cuda_releasePool"]  # the pool it left open


def test_an_output_sharing_memory_with_an_input_stays_plain(emitted_file, monkeypatch):
    mod, plan, cuda = _runtime(emitted_file, monkeypatch)
    run = plan.run
    plan.run = lambda ext, dev, xs, *rest: [xs[0]] if cuda.capturing is not None else run(ext, dev, xs, *rest)
    m = _Counted()
    for _ in range(4):
        mod._ff_call(m, plan, (torch.arange(4.0), 3.0))
    (rec,) = m._ff_graphs.values()
    assert rec.final and rec.graph is None and "shares memory" in rec.choice, rec.choice


@pytest.mark.parametrize("switch", [("env", "0"), ("file", False)])
def test_graphs_switched_off_leave_every_call_plain(emitted_file, monkeypatch, switch):
    mod, plan, cuda = _runtime(emitted_file, monkeypatch)
    if switch[0] == "env":
        monkeypatch.setenv("FUSEFORGE_CUDA_GRAPHS", switch[1])
    else:
        mod.CUDA_GRAPHS = switch[1]
    m = _Counted()
    x = torch.arange(4.0)
    for _ in range(4):
        assert torch.equal(mod._ff_call(m, plan, (x, 3.0)), _want(m, x))
    assert "_ff_graphs" not in m.__dict__ and float(m.count) == 4 and mod._ff_graph_choices(m) == {}


def test_calls_within_the_callers_own_capture_stay_plain(emitted_file, monkeypatch):
    """A caller capturing a CUDA graph of its own: no graph of ours is
    captured or replayed inside it (CUDA cannot), the plain path runs."""
    mod, plan, cuda = _runtime(emitted_file, monkeypatch)
    mod.CUDA_GRAPHS = "always"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    m = _Counted()
    x = torch.arange(4.0)
    for _ in range(4):
        assert torch.equal(mod._ff_call(m, plan, (x, 3.0)), _want(m, x))
    assert "_ff_graphs" not in m.__dict__ and float(m.count) == 4
