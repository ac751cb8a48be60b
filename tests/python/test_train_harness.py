"""`fuseforge run --train` / `bench --train` (harness/train.py): the loss, the
judging of gradients and buffers by compare.py's one rule, failures as
incorrect rows, the flags and the report's training section. The judging is
exercised on the CPU with eager models as candidates; the GPU test runs the
command end to end."""

import json
import warnings
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from conftest import ROOT, TINY_PROBLEM
from fuseforge.harness import bench, cli, train
from fuseforge.harness.report import render_markdown, render_table, summarize
from fuseforge.harness.worker import Result


class Net(nn.Module):
    """Linear, BatchNorm (running statistics), tanh: gradients and buffers."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 8)
        self.bn = nn.BatchNorm1d(8)

    def forward(self, x):
        return torch.tanh(self.bn(self.fc(x)))


def _maker(model):
    def make():
        copy = Net()
        copy.load_state_dict(model.state_dict())
        return copy.train(model.training)

    return make


@pytest.fixture
def setup():
    torch.manual_seed(0)
    model = Net()
    return model, _maker(model), [torch.randn(32, 16)]


def _check(make, inputs, candidate):
    eager = make()
    return train.check_training(eager, train.step_grads(eager, inputs), candidate, make, inputs, "fp32")


def test_loss_sums_the_floating_outputs_and_ignores_integer_ones():
    a = torch.tensor([1.0, 2.0])
    b = torch.tensor([0.5, 0.25], dtype=torch.float16)
    loss = train.training_loss({"a": a, "rest": (torch.tensor([7, 8]), [b])})
    assert loss.dtype == torch.float32 and loss.item() == 3.75
    with pytest.raises(ValueError, match="no floating-point output"):
        train.training_loss((torch.tensor([1, 2]),))


def test_a_training_step_accumulates_the_loss_gradient():
    lin = nn.Linear(3, 2)
    x = torch.randn(5, 3)
    grads = train.step_grads(lin, [x])
    assert lin.weight.grad is None and lin.bias.grad is None  # cleared after
    # Sorted by name: bias, weight. d(sum(xW^T + b))/db = batch, /dW = column sums of x.
    assert torch.equal(grads[0], torch.full((2,), 5.0))
    torch.testing.assert_close(grads[1], x.sum(0).expand(2, 3))


def test_exact_gradients_and_buffers_are_correct(setup):
    model, make, inputs = setup
    out = _check(make, inputs, make())
    assert out == {"grads_correct": True, "grads_verdict": "correct (within 1e-4 of eager)", "buffers_correct": True}


def test_gradients_perturbed_by_1e_2_are_incorrect_against_fp64(setup):
    model, make, inputs = setup
    candidate = make()
    candidate.fc.weight.register_hook(lambda g: g + 1e-2)
    out = _check(make, inputs, candidate)
    assert out["grads_correct"] is False and out["buffers_correct"] is True
    assert out["grads_verdict"].startswith("incorrect: max err vs eager 1.0e-02 and vs fp64 1.0e-02 > 2× eager's")
    assert out["grads_verdict"].endswith("(furthest: fc.weight.grad)")


def test_judge_asks_for_fp64_only_when_eager_does_not_decide():
    eager = [torch.randn(4, 4)]
    asked = []

    def fp64():
        asked.append(1)
        return [eager[0].double()]

    assert train.judge([eager[0].clone()], eager, fp64).rule == "eager" and not asked
    verdict = train.judge([eager[0] + 1e-2], eager, fp64)
    assert not verdict.correct and verdict.err64 == pytest.approx(1e-2, rel=1e-3) and asked
    shape = train.judge([eager[0][:2]], eager, fp64)
    assert shape.describe() == "incorrect: gradient 0 is torch.float32 (2, 4) where eager's is torch.float32 (4, 4)"


def test_batchnorm_buffers_after_three_steps_are_judged(setup):
    model, make, inputs = setup
    candidate = make()
    candidate.bn.momentum = 0.2  # the same outputs and gradients, other running statistics
    out = _check(make, inputs, candidate)
    assert out["grads_correct"] is True and out["buffers_correct"] is False
    eager = make()
    train.step_grads(eager, inputs)
    assert int(train.more_steps(eager, inputs, train.BUFFER_STEPS - 1)[0]) == 3  # bn.num_batches_tracked, first by name


def test_fp64_reference_runs_in_float64_and_leaves_the_copy_as_it_was(setup):
    model, make, inputs = setup
    copy = make()
    grads, buffers = train.fp64_reference(copy, inputs)
    assert all(g.dtype == torch.float64 for g in grads)
    assert [b.dtype for b in buffers] == [torch.int64, torch.float64, torch.float64]
    assert copy.fc.weight.dtype == torch.float32 and copy.fc.weight.grad is None


def test_models_without_a_training_step_are_skipped(setup):
    model, make, inputs = setup
    assert train.measure_training(model.eval(), make, inputs, ["eager"], "fp32") == {
        "skipped": "no training step: the model is in eval mode"
    }
    assert train.skip_reason(nn.ReLU()) == "no training step: the model has no parameters"


def test_a_failing_fuseforge_step_is_an_incorrect_row(setup, monkeypatch):
    import fuseforge

    model, make, inputs = setup

    class Broken(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            raise RuntimeError("no kernel for this\nsecond line")

    monkeypatch.setattr(fuseforge, "optimize", lambda m, **kw: Broken(m))
    out = train.measure_training(model, make, inputs, ["eager", "inductor"], "fp32")
    assert out["grads_correct"] is False and out["grads_verdict"] == "failed: RuntimeError: no kernel for this"
    assert out["fuseforge_ms"] is None and out["speedup_vs_inductor"] is None


def test_a_step_fuseforge_runs_eagerly_is_not_judged_as_fuseforge(setup):
    # CPU inputs: the optimized module warns and runs eagerly.
    model, make, inputs = setup
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = train.measure_training(model, make, inputs, ["eager"], "fp32")
    assert out["grads_correct"] is False
    assert out["grads_verdict"].startswith("failed: RuntimeError: running Net eagerly: inputs on cpu")


def test_a_measured_step_has_every_figure_in_order(setup, monkeypatch):
    """The train object's assembly, with the CUDA timing and memory figures
    stubbed and an eager copy standing in for fuseforge's."""
    import fuseforge

    model, make, inputs = setup
    monkeypatch.setattr(fuseforge, "optimize", lambda m, **kw: m)
    monkeypatch.setattr(train, "time_cuda", lambda steps, resets: {n: 2.0 if n == "eager" else 1.0 for n in steps})
    monkeypatch.setattr(train, "peak_step_bytes", lambda m, inputs: 100)
    out = train.measure_training(model, make, inputs, ["eager"], "fp32")
    assert list(out) == [key for key in train.FIELDS if "inductor" not in key]
    assert out["grads_correct"] and out["buffers_correct"] and out["speedup_vs_eager"] == 2.0
    assert out["peak_mem_ratio"] == 1.0


def test_train_flag_parses_for_run_and_bench(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(cli, "cmd_run", lambda args: seen.setdefault("run", args.train) and 0)
    monkeypatch.setattr(bench, "cmd_bench", lambda args: seen.setdefault("bench", args.train) and 0)
    assert cli.main(["run", "p.py", "--train"]) == 0 and cli.main(["bench", "dir", "--train"]) == 0
    assert seen == {"run": True, "bench": True}
    seen.clear()
    cli.main(["run", "p.py"])
    cli.main(["bench", "dir"])
    assert seen == {"run": False, "bench": False}


def test_bench_passes_train_to_each_problems_run(tmp_path):
    class Recorder:
        def run(self, argv, timeout):
            self.argv = argv
            return Result(0, "")

    args = SimpleNamespace(
        against="eager", mode=None, precision="fp32", seeds=1, timeout=10.0, eager_convs="default", train=True
    )
    worker = Recorder()
    bench.run_problem(tmp_path / "p.py", args, worker=worker)
    assert "--train" in worker.argv
    bench.run_problem(tmp_path / "p.py", SimpleNamespace(**{**vars(args), "train": False}), worker=worker)
    assert "--train" not in worker.argv


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU path's train object")
def test_cpu_run_train_says_the_step_needs_a_gpu(tmp_path, capsys):
    path, out = tmp_path / "tiny.py", tmp_path / "row.json"
    path.write_text(TINY_PROBLEM.format(prelude="", init="pass"))
    assert cli.main(["run", str(path), "--train", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["train"] == {"skipped": "no training step: it is measured on a CUDA GPU only"}
    assert "training step: no training step: it is measured on a CUDA GPU only" in capsys.readouterr().out


def _row(speedup, correct=True):
    figures = dict(eager_ms=2.0, inductor_ms=1.5, fuseforge_ms=2.0 / speedup, peak_mem_ratio=0.8)
    figures |= dict(speedup_vs_eager=speedup, speedup_vs_inductor=1.5 * speedup / 2.0, buffers_correct=None)
    verdict = "correct (within 1e-4 of eager)" if correct else "failed: RuntimeError: boom"
    return {"correct": True, "train": {**figures, "grads_correct": correct, "grads_verdict": verdict}}


def test_report_has_a_training_section_and_summary():
    problems = {
        "a": _row(2.0),
        "b": _row(0.5),
        "c": _row(8.0, correct=False),
        "d": {"correct": True, "train": {"skipped": "no training step: the model is in eval mode"}},
    }
    summary = summarize(problems)
    assert summary["train_steps"] == 3 and summary["train_grads_correct"] == 2
    assert summary["geomean_train_speedup_vs_eager"] == pytest.approx(1.0)
    assert summary["geomean_train_speedup_vs_inductor"] == pytest.approx(0.75)
    report = {"device": "X", "torch": "t", "precision": "fp32", "mode": "m", "command": "fuseforge bench a --train"}
    report |= {"date": "2026-01-01", "problems": problems, "summary": summary}
    lines = render_markdown(report).splitlines()
    start = lines.index("## Training step")
    assert lines[start + 2] == (
        "- training: 2/3 with correct gradients · vs eager: geomean 1.00× (correct ones) · "
        "vs inductor: geomean 0.75× (correct ones)"
    )
    assert lines[start + 4].startswith("| problem | grads | buffers | eager ms | inductor ms | fuseforge ms |")
    assert "| a | yes | — | 2.000 | 1.500 | 1.000 | 2.00 | 1.50 | 0.80 |" in lines
    assert "| c | NO | — | 2.000 | 1.500 | 0.250 | 8.00 | 6.00 | 0.80 |" in lines
    assert "| d | — | — | — | — | — | — | — | — |" in lines
    assert "- d: no training step: the model is in eval mode" in lines
    assert lines[-1] == "- c: failed: RuntimeError: boom"
    assert "training: 2/3" in str(render_table(report).caption)


def test_report_without_train_rows_has_no_training_section():
    problems = {"a": {"correct": True, "speedup_vs_eager": 2.0}}
    report = {"device": "X", "torch": "t", "precision": "fp32", "mode": "m", "command": "c", "date": "d"}
    report |= {"problems": problems, "summary": summarize(problems)}
    assert "train_steps" not in report["summary"] and "Training step" not in render_markdown(report)


@pytest.mark.gpu
def test_run_train_end_to_end_on_a_seed_problem(tmp_path):
    out = tmp_path / "row.json"
    path = ROOT / "benchmarks" / "problems" / "seeds" / "gemm_scale_batchnorm.py"
    assert cli.main(["run", str(path), "--train", "--seeds", "1", "--json", str(out)]) == 0
    t = json.loads(out.read_text())["train"]
    assert t["grads_correct"] is True and t["grads_verdict"].startswith("correct (")
    assert t["buffers_correct"] is True
    for key in ("eager_ms", "inductor_ms", "fuseforge_ms", "speedup_vs_eager", "speedup_vs_inductor", "peak_mem_ratio"):
        assert t[key] > 0, key
    assert t["speedup_vs_eager"] == pytest.approx(t["eager_ms"] / t["fuseforge_ms"])


def test_bench_exit_code_counts_incorrect_training_steps(tmp_path):
    def part(name, problems):
        path = tmp_path / f"{name}.json"
        report = {"device": "X", "torch": "t", "precision": "fp32", "mode": "m", "eager_convs": "default"}
        path.write_text(json.dumps({**report, "command": name, "date": "d", "problems": problems}))
        return str(path)

    good = part("good", {"a": _row(2.0), "d": {"correct": True, "train": {"skipped": "no training step: eval"}}})
    bad = part("bad", {"c": _row(8.0, correct=False)})
    out = tmp_path / "all.json"
    assert cli.main(["bench", "--merge", good]) == 0
    assert cli.main(["bench", "--merge", good, bad, "--json", str(out)]) == 1
    assert json.loads(out.read_text())["summary"]["train_grads_correct"] == 1
