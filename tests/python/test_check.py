"""The correctness checker's memory discipline (harness/check.py,
harness/compare.py), on the CPU: outputs are compared in chunks, and the
checker holds no more than the eager and optimized outputs, one set of inputs
and, for the fp64 reference, their float64 versions."""

import re
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
    from fuseforge.runtime import module, options

    calls = []
    real = module.capture
    monkeypatch.setattr(module, "capture", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setenv(options.ENV_WARM_START, "0")  # a graph an earlier run kept would be loaded, not captured
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
    assert result["correct"] and result["accuracy_rule"] == "eager" and result["fp64_seeds"] == 1, result
    assert result["eager_err_vs_fp64"] is not None and result["eager_err_vs_fp64"] < 1e-5, result


def test_fp64_reference_makes_forwards_own_tensors_in_float64():
    """An LSTM cell stepped from a zero state forward makes without a dtype:
    in the reference that state is float64 like the weights (else the cell
    refuses mixed dtypes), and the default dtype is float32 again after."""

    class Cell(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cell = torch.nn.LSTMCell(8, 16)

        def forward(self, x):
            h = torch.zeros(x.shape[0], 16)
            h, c = self.cell(x[:, 0], (h, torch.zeros_like(h)))
            return self.cell(x[:, 1], (h, c))[0]

    model, x = Cell(), torch.randn(4, 2, 8)
    (out64,) = check.float64_outputs(model, [x])
    torch.set_default_dtype(torch.float64)
    try:
        with torch.no_grad():
            want = model.double()(x.double())
    finally:
        torch.set_default_dtype(torch.float32)
        model.float()
    assert out64.dtype == torch.float64 and torch.equal(out64, want)
    assert torch.get_default_dtype() == torch.float32


RECURRENT_ATTRIBUTE_PROBLEM = textwrap.dedent(
    """
    import torch

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(16, 16)
            self.hidden = torch.zeros(4, 16)

        def forward(self, x):
            self.hidden = torch.tanh(self.lin(x) + self.hidden)
            return self.hidden * 2

    def get_inputs():
        return [torch.randn(4, 16)]

    def get_init_inputs():
        return []
    """
)


def test_a_tensor_attribute_reassigned_in_forward_is_checked_like_a_buffer(tmp_path):
    """The new value of a plain tensor attribute a forward reassigns is judged
    with the outputs (eager's, the plan's, fp64's), and every run starts from
    the attribute as it was, which the model holds again afterwards."""
    from fuseforge.harness.cpu_check import check_on_cpu

    path = tmp_path / "recurrent.py"
    path.write_text(RECURRENT_ATTRIBUTE_PROBLEM)
    mod, model = build_model(str(path), None, "cpu")
    model.hidden = torch.randn(4, 16)
    start = model.hidden.clone()
    assert set(check.state(model)) == {"hidden"}
    figures, plan = check_on_cpu(model, [torch.randn(4, 16)], "fp32", 90)
    assert figures["correct"] and [n for n, _ in plan.mutations], figures
    assert torch.equal(model.hidden, start)
    fast = torch.nn.Module()
    fast.forward = lambda x: model(x)
    result = check.check_correctness(mod, model, seeds=2, device="cpu", fast=fast)
    assert result["correct"] and result["accuracy_rule"] == "eager", result
    assert torch.equal(model.hidden, start)
    # The same outputs without the new state: incorrect, as a missed buffer update is.
    fast.forward = lambda x: torch.tanh(model.lin(x) + model.hidden) * 2
    assert not check.check_correctness(mod, model, seeds=1, device="cpu", fast=fast)["correct"]


def _t(*values):
    return torch.tensor(values, dtype=torch.float64)


def test_within_1e4_of_eager_is_correct_up_to_the_boundary():
    ref, ref64 = _t(0.0, 1.0), _t(0.0, 1.0)
    at = compare.assess([_t(1e-4, 1.0 + 2e-4)], [ref], [ref64], [], [])  # atol + rtol·|eager|, exactly
    assert at.correct and at.rule == "eager", at
    assert at.describe() == "correct (within 1e-4 of eager)"
    past = compare.assess([_t(1.0001e-4, 1.0)], [ref], [ref64], [], [])
    assert not past.correct and past.rule is None, past  # eager is exact: twice its error is 0
    alone = compare.assess([_t(1e-4, 1.0)], [ref], None, [], [])  # without an fp64 reference
    assert alone.correct and alone.rule == "eager" and alone.err64 is None
    wrong = compare.assess([_t(1e-3, 1.0)], [ref], None, [], [])
    assert not wrong.correct and wrong.describe() == "incorrect: max err vs eager 1.0e-03, not within 1e-4"


def test_at_most_twice_eagers_error_vs_fp64_is_correct_up_to_the_boundary():
    """Eager 2^-10 off fp64; ours 2^-9 off on the other side (3·2^-10 from
    eager, far past 1e-4): exactly twice eager's error holds, a hair more not."""
    e = 2.0**-10
    ref, ref64 = [_t(e, 1.0)], [_t(0.0, 1.0)]
    at = compare.assess([_t(-2 * e, 1.0)], ref, ref64, [], [])
    assert at.correct and at.rule == "fp64" and at.err == 3 * e and at.err64 == 2 * at.eager64, at
    assert at.describe() == "correct (error vs fp64 2.0e-03 ≤ 2× eager's 9.8e-04)"
    past = compare.assess([_t(-2 * e - 2.0**-30, 1.0)], ref, ref64, [], [])
    assert not past.correct and past.rule is None, past
    assert past.describe() == "incorrect: max err vs eager 2.9e-03 and vs fp64 2.0e-03 > 2× eager's 9.8e-04"
    assert compare.judge([_t(-2 * e, 1.0)], ref, ref64, [], []) == (True, 3 * e, 2 * e, e)


def test_updated_buffers_are_judged_by_the_same_rule():
    """A running statistic eager updates 1e-3 off fp64 and fuseforge 1.5e-3
    off on the other side: past 1e-4 of eager, but within twice eager's error
    against fp64 (the buffers as the fp64 run left them), so correct; 2.5e-3
    off is not. Outputs and buffers are judged together."""
    out, buf64 = [_t(0.5)], [_t(1.0)]
    eager_buf = [_t(1.0 + 1e-3)]
    ok = compare.assess(out, out, out, [_t(1.0 - 1.5e-3)], eager_buf, buf64)
    assert ok.correct and ok.rule == "fp64" and ok.err == pytest.approx(2.5e-3), ok
    bad = compare.assess(out, out, out, [_t(1.0 - 2.5e-3)], eager_buf, buf64)
    assert not bad.correct and bad.err64 == pytest.approx(2.5e-3) and bad.eager64 == pytest.approx(1e-3), bad
    with pytest.raises(ValueError, match="fp64 reference has 1 outputs and 0 buffers"):
        compare.assess(out, out, out, [_t(1.0)], eager_buf)


def test_a_shape_or_dtype_unlike_eagers_is_incorrect_whatever_the_errors():
    ref = [_t(0.0, 1.0)]
    v = compare.assess([torch.tensor([0.0, 1.0])], ref, ref, [], [])
    assert not v.correct and v.rule is None
    assert v.describe() == "incorrect: output 0 is torch.float32 (2,) where eager's is torch.float64 (2,)"
    v = compare.assess([*ref, *ref], ref, ref, [], [])
    assert not v.correct and v.describe() == "incorrect: 2 outputs where eager has 1"


def test_the_verdict_over_seeds_names_the_rule_that_held():
    eager = compare.Verdict(True, "eager", 1e-5, 1e-6, 1e-6)
    fp64 = [compare.Verdict(True, "fp64", 1e-3, 4e-4, 3e-4), compare.Verdict(True, "fp64", 2e-3, 6e-4, 5e-4)]
    assert compare.combine([eager, eager]) == compare.Verdict(True, "eager", 1e-5)
    both = compare.combine([eager, *fp64])
    assert both == compare.Verdict(True, "fp64", 2e-3, 6e-4, 5e-4)
    wrong = compare.Verdict(False, None, 1e-2, 9e-3, 1e-4)
    assert compare.combine([eager, wrong, *fp64]) is wrong


CANCELLING = PROBLEM.replace(
    "return x * self.scale", "self.acc.add_((x + 1e4) - 1e4)\n        return (x + 1e4) - 1e4"
).replace("self.scale = nn.Parameter(torch.tensor(1.5))", f"self.register_buffer('acc', torch.zeros({N}))")


@pytest.mark.parametrize("exact", [True, False])
def test_closer_to_fp64_than_eager_is_correct_outputs_and_buffers_alike(tmp_path, exact):
    """(x + 1e4) - 1e4 in f32 loses x's low bits (eager ~5e-4 off fp64), to the
    output and to a running buffer: an optimized module that keeps them is far
    past 1e-4 of eager on both, yet correct by the fp64 rule; one off by 1e-2
    everywhere is incorrect, and the verdict says by how much."""
    path = tmp_path / "cancelling.py"
    path.write_text(CANCELLING)
    mod, model = build_model(str(path), None, "cpu")
    error = 0.0 if exact else 1e-2

    def forward(x):
        model.acc.add_(x + error)
        return x + error

    fast = torch.nn.Module()
    fast.forward = forward
    result = check.check_correctness(mod, model, seeds=2, device="cpu", fast=fast)
    assert result["max_err_vs_eager"] > 1e-4 and result["fp64_seeds"] == 2, result
    if exact:
        assert result["correct"] and result["accuracy_rule"] == "fp64", result
        assert result["max_err_vs_fp64"] < 1e-9 and result["eager_err_vs_fp64"] > 1e-4, result
        assert re.fullmatch(r"correct \(error vs fp64 \S+ ≤ 2× eager's \S+\)", result["verdict"]), result
    else:
        assert not result["correct"] and result["accuracy_rule"] is None, result
        assert result["verdict"].startswith("incorrect: max err vs eager "), result
        assert " > 2× eager's " in result["verdict"], result
    assert torch.equal(model.acc, torch.zeros(N))  # buffers as before the check


@pytest.mark.parametrize("error", [0.0, 1e-2])
def test_a_baseline_is_judged_by_the_same_rule_from_the_same_state(tmp_path, error):
    """baseline_accuracy (torch.compile's row of a report) applies
    check_correctness's rule to another compiled form of the model: one that
    keeps the low bits eager loses is correct by the fp64 rule, one off by
    1e-2 is not, and its buffer update is judged from the state eager's run
    started from, which the model holds again afterwards."""
    path = tmp_path / "cancelling.py"
    path.write_text(CANCELLING)
    mod, model = build_model(str(path), None, "cpu")

    def baseline(x):
        model.acc.add_(x + error)
        return x + error

    judged = check.baseline_accuracy(mod, model, baseline, "cpu")
    assert set(judged) == {"err_vs_fp64", "correct", "verdict"}
    if error == 0.0:
        assert judged["correct"] and judged["err_vs_fp64"] < 1e-9, judged
        assert judged["verdict"].startswith("correct (error vs fp64 "), judged
    else:
        assert not judged["correct"] and judged["err_vs_fp64"] > 5e-3, judged
        assert " > 2× eager's " in judged["verdict"], judged
    assert torch.equal(model.acc, torch.zeros(N))
