"""GPU tests of `fuseforge emit`: each seed problem's emitted file, loaded in
a fresh process that never imports fuseforge, matches eager (outputs and
buffers, several seeds, the model's own mode) — tools/check_emitted.py does
the check; its CUDA graphs give the plain path's outputs, update buffers once
a call, see weights changed in place, capture again for replaced ones, leave
returned outputs be, and a capture that fails leaves the call plain. Skipped
without a GPU."""

import functools
import importlib.util
import json
import re
import subprocess
import sys
import warnings

import pytest
import torch

from conftest import PROBLEMS, ROOT
from fuseforge.harness.emit import emit_problem
from fuseforge.harness.problem import problem_name

pytestmark = pytest.mark.gpu

SEEDS = [p for p in PROBLEMS if p.parent.name == "seeds"]


@pytest.mark.parametrize("path", SEEDS, ids=problem_name)
def test_emitted_seed_matches_eager_in_a_fresh_process(path, tmp_path):
    out = tmp_path / f"{problem_name(path)}.py"
    out.write_text(emit_problem(path))
    r = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "check_emitted.py"), str(out), "--seeds", "2"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.stdout.strip(), r.stderr[-3000:]
    row = json.loads(r.stdout.strip().splitlines()[-1])
    assert row["correct"] and not row["imported_fuseforge"] and not row["fallbacks"], row
    assert r.returncode == 0


def test_emitted_module_follows_new_weights(tmp_path):
    """Weight-derived values are computed at call time: new weights, new outputs."""
    path = next(p for p in SEEDS if p.stem == "gemm_scale_batchnorm")
    out = tmp_path / "m.py"
    out.write_text(emit_problem(path))
    script = f"""
import runpy, torch
ns = runpy.run_path({str(out)!r})
model = ns["Model"](*ns["get_init_inputs"]()).cuda().eval()
new = ns["ModelNew"](*ns["get_init_inputs"]()).cuda().eval()
x = ns["get_inputs"]()[0].cuda()
for _ in range(2):
    model.bn.running_var.uniform_(0.5, 2.0)
    model.bn.running_mean.normal_()
    new.load_state_dict(model.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(new(x), model(x), rtol=1e-4, atol=1e-4)
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]


@pytest.fixture(scope="module")
def emitted_module(tmp_path_factory):
    """emitted_module(stem): a seed's emitted file, imported once here (its
    extension is built at the first fused call; torch's cache keeps it)."""
    out = tmp_path_factory.mktemp("graphs")
    loaded: dict = {}

    def load(stem):
        if stem not in loaded:
            path = out / f"{stem}.py"
            path.write_text(emit_problem(next(p for p in SEEDS if p.stem == stem)))
            spec = importlib.util.spec_from_file_location(f"emitted_graphs_{stem}", path)
            loaded[stem] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(loaded[stem])
        return loaded[stem]

    return load


@pytest.fixture
def graphs(monkeypatch):
    """graphs(mod, setting): the emitted module with CUDA_GRAPHS = setting for this test."""
    monkeypatch.delenv("FUSEFORGE_CUDA_GRAPHS", raising=False)

    def use(mod, setting):
        monkeypatch.setattr(mod, "CUDA_GRAPHS", setting)
        mod._FF_WARNED.clear()
        return mod

    return use


def _pair(mod, mode):
    """Model and ModelNew on the GPU in `mode`, with the same weights."""
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs()).cuda().train(mode == "train")
    new = mod.ModelNew(*mod.get_init_inputs()).cuda().train(mode == "train")
    new.load_state_dict(model.state_dict())
    return model, new


def _inputs(mod, seed):
    torch.manual_seed(seed)
    return [x.cuda() if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]


def _plain(mod, new, *x):
    """new(*x) on the plain fused path: no CUDA graph."""
    saved, mod.CUDA_GRAPHS = mod.CUDA_GRAPHS, False
    try:
        with torch.no_grad():
            return new(*x)
    finally:
        mod.CUDA_GRAPHS = saved


def _same(got, want, msg=""):
    """Equal up to the rounding of one kernel run against another (the same kernels)."""
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()), msg=msg)


def _record(new):
    (rec,) = new.__dict__["_ff_graphs"].values()
    return rec


@pytest.mark.parametrize("setting", [True, "always"])
def test_graph_outputs_are_the_plain_paths_and_stay_put(emitted_module, graphs, setting):
    mod = graphs(emitted_module("gemm_divide_sum_scaling"), setting)
    _, ref = _pair(mod, "eval")
    _, new = _pair(mod, "eval")
    xs = [_inputs(mod, seed) for seed in range(5)]
    want = [_plain(mod, ref, *x) for x in xs]
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        got = [new(*x) for x in xs]  # plain, plain, the capture, replays (or plain where that timed faster)
    assert not [str(w.message) for w in caught if "ModelNew" in str(w.message)]
    for i, (g, w) in enumerate(zip(got, want)):  # compared after all calls: a replay leaves earlier outputs be
        _same(g, w, f"call {i}")
    assert len({g.data_ptr() for g in got}) == len(got)
    rec = _record(new)
    if setting == "always":
        assert rec.graph is not None and rec.captures == 1, rec.choice
    else:
        assert re.match(r"(graph|plain): [0-9.]+ ms a call", rec.choice), rec.choice
    assert list(mod._ff_graph_choices(new).values()) == [rec.choice]


@pytest.mark.parametrize("setting", [True, "always"])
def test_graph_updates_batchnorm_statistics_once_a_call(emitted_module, graphs, setting):
    """Train mode: after every call (the third captures, and with True times
    the plain call against the graph, undoing what the timing runs update)
    the running statistics are the plain path's and eager's, the outputs the
    plain path's."""
    mod = graphs(emitted_module("gemm_scale_batchnorm"), setting)
    model, new = _pair(mod, "train")
    _, ref = _pair(mod, "train")
    for seed in range(5):
        x = _inputs(mod, seed)
        want = _plain(mod, ref, *x)
        with torch.no_grad():
            got = new(*x)
            model(*x)
        _same(got, want, f"call {seed}")  # (eager's outputs: test_emitted_seed_matches_eager_in_a_fresh_process)
        for (name, b), (_, r), (_, e) in zip(new.named_buffers(), ref.named_buffers(), model.named_buffers()):
            torch.testing.assert_close(b, r, rtol=1e-5, atol=1e-6, msg=f"{name} after call {seed}")
            torch.testing.assert_close(b, e, rtol=1e-4, atol=1e-4, msg=f"{name} after call {seed}")
    rec = _record(new)
    assert "failed" not in rec.choice and (rec.graph is not None or setting is True), rec.choice


def _tensor(module, name):
    return functools.reduce(getattr, name.split("."), module)


@pytest.mark.parametrize(
    "stem, name",
    [
        ("gemm_divide_sum_scaling", "weight"),  # read by the prepare section: computed again, copied in
        ("gemm_scale_batchnorm", "gemm.weight"),  # read by the graph where it is
        ("gemm_scale_batchnorm", "bn.running_var"),  # prepared (eval mode)
    ],
)
def test_graph_sees_a_tensor_changed_in_place(emitted_module, graphs, stem, name):
    mod = graphs(emitted_module(stem), "always")
    _, ref = _pair(mod, "eval")
    _, new = _pair(mod, "eval")
    x = _inputs(mod, 0)
    with torch.no_grad():
        for _ in range(4):  # plain, plain, the capture, a replay
            new(*x)
        for m in (ref, new):
            _tensor(m, name).mul_(2)
        got = new(*x)
    _same(got, _plain(mod, ref, *x))
    rec = _record(new)
    assert rec.graph is not None and rec.captures == 1, rec.choice  # replayed, not captured again


def test_graph_is_captured_again_for_a_replaced_weight(emitted_module, graphs):
    mod = graphs(emitted_module("gemm_scale_batchnorm"), "always")
    _, ref = _pair(mod, "eval")
    _, new = _pair(mod, "eval")
    x = _inputs(mod, 0)
    with torch.no_grad():
        for _ in range(4):
            new(*x)
        for m in (ref, new):
            m.gemm.weight = torch.nn.Parameter(m.gemm.weight.detach() * 2)
        got = new(*x)
    _same(got, _plain(mod, ref, *x))
    rec = _record(new)
    assert rec.graph is not None and rec.captures == 2, rec.choice


def test_another_input_shape_runs_model_forward_and_the_graph_stays(emitted_module, graphs):
    mod = graphs(emitted_module("gemm_divide_sum_scaling"), "always")
    model, new = _pair(mod, "eval")
    x = _inputs(mod, 0)
    y = [x[0][: x[0].shape[0] // 2].clone()]
    with torch.no_grad():
        first = [new(*x) for _ in range(3)]  # the third captures
        with pytest.warns(UserWarning, match="running Model.forward"):
            other = new(*y)
        again = new(*x)
        torch.testing.assert_close(other, model(*y))
    _same(again, first[0])
    rec = _record(new)
    assert rec.graph is not None and rec.captures == 1, rec.choice


def test_graphs_off_by_the_environment(emitted_module, graphs, monkeypatch):
    mod = graphs(emitted_module("gemm_divide_sum_scaling"), True)
    monkeypatch.setenv("FUSEFORGE_CUDA_GRAPHS", "0")
    _, new = _pair(mod, "eval")
    x = _inputs(mod, 0)
    with torch.no_grad():
        for _ in range(4):
            new(*x)
    assert mod._ff_graph_choices(new) == {}


def test_a_capture_that_fails_leaves_the_call_plain_with_one_warning(emitted_module):
    """A host sync in the run section (added here) cannot be captured: the
    calls stay on the plain path, correct, with one warning naming why, and
    the current stream is the default one again. In a process of its own."""
    path = emitted_module("gemm_divide_sum_scaling").__file__
    script = f"""
import importlib.util, json, warnings, torch
spec = importlib.util.spec_from_file_location("emitted", {path!r})
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
plan = mod._FF_PLANS["eval"]
run = plan.run

def syncing_run(ext, dev, xs, *rest):
    float(xs[0].sum())  # a host sync
    return run(ext, dev, xs, *rest)

plan.run = syncing_run
torch.manual_seed(0)
ref = mod.ModelNew(*mod.get_init_inputs()).cuda().eval()
new = mod.ModelNew(*mod.get_init_inputs()).cuda().eval()
new.load_state_dict(ref.state_dict())
xs = [[x.cuda() for x in mod.get_inputs()] for _ in range(5)]
with torch.no_grad():
    mod.CUDA_GRAPHS = False
    want = [ref(*x) for x in xs]
    mod.CUDA_GRAPHS = True
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [new(*x) for x in xs]
print(json.dumps({{
    "same": all(torch.allclose(g, w, rtol=1e-5, atol=1e-5 * float(w.abs().max())) for g, w in zip(got, want)),
    "warnings": [str(w.message) for w in caught if "ModelNew" in str(w.message)],
    "choices": list(mod._ff_graph_choices(new).values()),
    "default_stream": torch.cuda.current_stream() == torch.cuda.default_stream(),
}}))
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0 and r.stdout.strip(), r.stderr[-3000:]
    row = json.loads(r.stdout.strip().splitlines()[-1])
    assert row["same"] and row["default_stream"], row
    assert len(row["warnings"]) == 1 and "capturing one failed" in row["warnings"][0], row
    assert len(row["choices"]) == 1 and row["choices"][0].startswith("plain: capturing a CUDA graph failed"), row
