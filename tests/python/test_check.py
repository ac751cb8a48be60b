"""The correctness checker's memory discipline (harness/check.py,
harness/compare.py), on the CPU: outputs are compared in chunks, and the
checker holds no more than the eager and optimized outputs, one set of inputs
and, for the fp64 reference, their float64 versions."""

import textwrap
import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fuseforge.harness import check, compare
from fuseforge.harness.problem import build_model


class PeakBytes(TorchDispatchMode):
    """Tracks every tensor an op makes (weakly) and the peak of the bytes of
    the distinct storages alive, sampled after each op."""

    def __init__(self):
        super().__init__()
        self.alive = weakref.WeakValueDictionary()
        self.peak = 0
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
                self.alive[id(t)] = t
        storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in list(self.alive.values())}
        self.peak = max(self.peak, sum(storages.values()))
        return out


def test_chunks_cover_every_element_once_within_the_limit():
    x = torch.arange(3 * 1 * 7 * 50, dtype=torch.float32).reshape(3, 1, 7, 50)
    pieces = list(compare.chunks(x, x.clone(), limit=40))
    assert all(p.numel() <= 40 for p, _ in pieces)
    assert sorted(torch.cat([p.reshape(-1) for p, _ in pieces]).tolist()) == x.reshape(-1).tolist()
    assert all(torch.equal(p, q) for p, q in pieces)


def test_chunked_compare_makes_no_temporary_larger_than_a_chunk(monkeypatch):
    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", 1000)
    a = torch.randn(64, 1000)
    b = a.clone()
    b[17, 3] += 0.5
    a[40, 7] = b[40, 7] = float("nan")  # NaN in both counts as equal
    with PeakBytes() as mode:
        err = compare.max_err([a], [b])
        same = compare.close([a], [b])
    assert err == pytest.approx(0.5, rel=1e-6) and not same
    assert mode.largest <= 1000, mode.largest
    b[17, 3] = a[17, 3]
    assert compare.max_err([a], [b]) == 0.0 and compare.close([a], [b])
    a[5, 5] = float("nan")  # NaN on one side only is a difference
    assert not compare.close([a], [b]) and compare.max_err([a], [b]) == float("inf")


N = 1 << 16
PROBLEM = textwrap.dedent(f"""
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(torch.tensor(1.5))

        def forward(self, x):
            return x * self.scale

    def get_inputs():
        return [torch.randn({N})]

    def get_init_inputs():
        return []
""")


def test_checker_peak_is_within_three_times_the_problems_tensors(tmp_path, monkeypatch):
    """Input and output are 4N bytes each; checking holds at most 3x that:
    the two f32 outputs (8N) and the fp64 input and output (16N), with the
    f32 inputs dropped first and comparisons chunked (unchunked, the float64
    temporaries alone would add 16N and more)."""
    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", N // 16)
    path = tmp_path / "scale.py"
    path.write_text(PROBLEM)
    mod, model = build_model(str(path), None, "cpu")
    fast = torch.nn.Module()
    fast.forward = lambda x: model(x)  # stands in for the optimized module: it shares the model
    with PeakBytes() as mode:
        result = check.check_correctness(mod, model, seeds=2, device="cpu", fast=fast)
    own = 2 * 4 * N
    assert result["correct"] and result["fp64_seeds"] == 1, result
    assert result["max_err_vs_fp64"] is not None and result["max_err_vs_fp64"] < 1e-6
    assert mode.peak <= 3 * own + 4096, (mode.peak, own)
    assert model.scale.dtype == torch.float32  # the fp64 reference converted it back


def test_fp64_conversion_is_in_place_and_exact():
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.BatchNorm1d(4))
    weight = model[0].weight
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with check.in_float64(model):
        assert model[0].weight is weight and weight.dtype == torch.float64
        assert model[1].running_mean.dtype == torch.float64
        assert model[1].num_batches_tracked.dtype == torch.int64
    after = model.state_dict()
    assert all(after[k].dtype == v.dtype and torch.equal(after[k], v) for k, v in before.items())


def test_a_forward_that_writes_its_parameters_is_refused(tmp_path):
    path = tmp_path / "writes.py"
    path.write_text(
        PROBLEM.replace(
            "return x * self.scale",
            "with torch.no_grad():\n            self.scale.add_(1)\n        return x * self.scale",
        )
    )
    mod, model = build_model(str(path), None, "cpu")
    fast = torch.nn.Module()
    fast.forward = lambda x: model(x)
    with pytest.raises(RuntimeError, match="forward wrote parameters in place"):
        check.check_correctness(mod, model, seeds=1, device="cpu", fast=fast)


@pytest.mark.gpu
def test_run_captures_the_problem_once(tmp_path, monkeypatch):
    """`fuseforge run` (bench's serial phase) checks and times one optimized
    module: one capture, not one for the check and another for the timing."""
    from fuseforge.harness import cli
    from fuseforge.runtime import module

    calls = []
    real = module.capture
    monkeypatch.setattr(module, "capture", lambda *a, **k: calls.append(1) or real(*a, **k))
    path = tmp_path / "scale.py"
    path.write_text(PROBLEM.replace("torch.randn(", "torch.randn(4, "))
    assert cli.main(["run", str(path), "--seeds", "2", "--against", "eager"]) == 0
    assert len(calls) == 1, calls


LSTM_PROBLEM = textwrap.dedent("""
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(8, 16, batch_first=True)
            self.h0 = torch.randn(1, 4, 16)  # plain attributes: neither parameters nor buffers
            self.c0 = torch.randn(1, 4, 16)

        def forward(self, x):
            self.h0 = self.h0.to(x.device)  # reassigned in forward, as some problems do
            out, _ = self.lstm(x, (self.h0, self.c0))
            return out[:, -1]

    def get_inputs():
        return [torch.randn(4, 5, 8)]

    def get_init_inputs():
        return []
""")


def test_fp64_reference_converts_tensor_attributes_on_copies(tmp_path):
    """An LSTM's initial state held as plain tensor attributes: the fp64
    reference runs it in float64 (with the attributes left in float32, the
    LSTM refuses mixed dtypes) on float64 copies, and the model keeps its own
    tensor objects, dtypes and values."""
    path = tmp_path / "lstm.py"
    path.write_text(LSTM_PROBLEM)
    mod, model = build_model(str(path), None, "cpu")
    h0, c0 = model.h0, model.c0
    saved = h0.clone(), c0.clone()
    x = torch.randn(4, 5, 8)
    (out64,) = check.float64_outputs(model, [x])
    want = model.lstm.double()(x.double(), (saved[0].double(), saved[1].double()))[0][:, -1]
    model.lstm.float()
    assert out64.dtype == torch.float64 and torch.equal(out64, want)
    assert model.h0 is h0 and model.c0 is c0 and h0.dtype == c0.dtype == torch.float32
    assert torch.equal(h0, saved[0]) and torch.equal(c0, saved[1])
    with check.in_float64(model):
        assert model.c0 is not c0 and model.c0.dtype == torch.float64
        model.c0.add_(1)  # a forward that updates an attribute updates the copy only
    assert model.c0 is c0 and torch.equal(c0, saved[1])
    fast = torch.nn.Module()
    fast.forward = lambda x: model(x)
    result = check.check_correctness(mod, model, seeds=2, device="cpu", fast=fast)
    assert result["correct"] and result["fp64_seeds"] == 1, result
    assert result["eager_err_vs_fp64"] is not None and result["eager_err_vs_fp64"] < 1e-5, result
