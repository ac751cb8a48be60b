"""Failures name themselves in one line: the CLI prints what failed, where in
the user's code and what to do, and exits 2 (--verbose adds the traceback);
fuseforge.optimize and the torch.compile backend warn once, with the reason,
when they run a model eagerly."""

import re
import textwrap
import warnings

import pytest
import torch

import fuseforge
from fuseforge.harness import cli

HEAD = textwrap.dedent("""
    import torch
    import torch.nn as nn

    def get_inputs():
        return [torch.randn(8, 16)]

    def get_init_inputs():
        return []

    class Model(nn.Module):
        def forward(self, x):
""")
FORWARD_LINE = HEAD.count("\n") + 1  # the line of forward's body in the files below


def _problem(tmp_path, name, body):
    path = tmp_path / f"{name}.py"
    path.write_text(HEAD + f"        {body}\n")
    return path


# (name, forward's body, words the line must carry: the cause and the advice)
CAPTURE_FAILURES = [
    ("data_dependent_if", "return x * 2 if x.sum() > 0 else x - 1", ["data-dependent", "torch.where"]),
    ("nonzero", "return torch.nonzero(x > 0).float()", ["nonzero", "static shapes"]),
    ("fft", "return torch.fft.fft(x).real", ["complex64", "outside fuseforge's IR"]),
    ("inplace_on_input", "x.add_(1); return x * 2", ["mutates its input 'x'", "x.clone()"]),
    ("wrong_input_shape", "return x @ torch.ones(32, 4, device=x.device)", ["RuntimeError", "check get_inputs()"]),
]


def _run(argv, capsys):
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.err


@pytest.mark.parametrize("name,body,words", CAPTURE_FAILURES, ids=[c[0] for c in CAPTURE_FAILURES])
def test_capture_failure_is_one_line_naming_the_users_line(tmp_path, capsys, name, body, words):
    path = _problem(tmp_path, name, body)
    code, err = _run(["run", str(path)], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("fuseforge run: ")
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert f"(at {name}.py:{FORWARD_LINE} in forward: {body.split(';')[0]}" in lines[0], lines[0]
    assert "Traceback" not in err and "--verbose" in lines[0]


def test_verbose_adds_the_traceback(tmp_path, capsys):
    path = _problem(tmp_path, "nonzero", "return torch.nonzero(x > 0).float()")
    code, err = _run(["run", str(path), "--verbose"], capsys)
    assert code == 2 and "Traceback (most recent call last)" in err
    assert err.strip().splitlines()[-1].startswith("fuseforge run: ")


@pytest.mark.parametrize(
    "content,words",
    [
        (None, "no problem file at"),
        ("x = 1\n", "is not a problem file: missing Model, get_inputs, get_init_inputs"),
        ("def get_inputs(:\n", "SyntaxError: invalid syntax (at bad.py:1: def get_inputs(:)"),
        (
            HEAD.replace("torch.randn(8, 16)", "torch.randn(8, 16) + undefined_name") + "        return x\n",
            "NameError: name 'undefined_name' is not defined (at bad.py:",
        ),
    ],
)
def test_bad_problem_files_are_one_line_and_exit_2(tmp_path, capsys, content, words):
    path = tmp_path / "bad.py"
    if content is not None:
        path.write_text(content)
    for command in (["run", str(path)], ["explain", str(path)], ["emit", str(path), "-o", str(tmp_path / "o.py")]):
        code, err = _run(command, capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1 and words in err, (command, err)


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert re.fullmatch(rf"fuseforge {re.escape(fuseforge.__version__)} \(torch .+\)\n", capsys.readouterr().out)


class Scale(torch.nn.Module):
    def forward(self, x):
        return x * 2


def test_optimize_warns_once_when_it_runs_cpu_inputs_eagerly():
    fast = fuseforge.optimize(Scale())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            torch.testing.assert_close(fast(torch.ones(4)), torch.full((4,), 2.0))
    messages = [str(w.message) for w in caught if "fuseforge" in str(w.message)]
    assert messages == [
        "fuseforge: running Scale eagerly: inputs on cpu, and fuseforge compiles for CUDA devices only"
    ], messages


def test_the_backend_warns_once_too():
    compiled = torch.compile(Scale(), backend="fuseforge")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled(torch.ones(4))
        compiled(torch.ones(4))
    messages = [str(w.message) for w in caught if "fuseforge" in str(w.message)]
    assert len(messages) == 1 and "eagerly: inputs on cpu" in messages[0], messages


class DataDependent(torch.nn.Module):
    def forward(self, x):
        return x * 2 if x.sum() > 0 else x - 1


@pytest.mark.gpu
def test_a_model_that_cannot_be_captured_is_split_warns_once_and_is_not_captured_again(monkeypatch, caplog):
    from fuseforge.runtime import module

    calls = []
    real = module.capture
    monkeypatch.setattr(module, "capture", lambda *a, **k: calls.append(1) or real(*a, **k))
    fast = fuseforge.optimize(DataDependent())
    x = torch.ones(8, 16, device="cuda")
    with warnings.catch_warnings(record=True) as caught, caplog.at_level("INFO", logger="fuseforge"):
        warnings.simplefilter("always")
        for _ in range(3):
            torch.testing.assert_close(fast(x), x * 2)
        torch.testing.assert_close(fast(-x), -x - 1)
    # The parts dynamo captured were compiled to plans.
    assert any(r.getMessage().startswith("fuseforge: inference graph:") for r in caplog.records)
    messages = [str(w.message) for w in caught if "fuseforge" in str(w.message)]
    assert len(messages) == 1 and len(calls) == 1, (messages, calls)
    line = messages[0]
    assert "\n" not in line and "cannot capture it whole" in line and "data-dependent" in line
    assert "dynamo splits it" in line
    assert "test_errors.py:" in line and "in forward: return x * 2 if x.sum() > 0 else x - 1" in line


@pytest.mark.gpu
def test_run_on_a_gpu_refuses_a_model_it_cannot_capture(tmp_path, capsys):
    """On the GPU path too: a run that fell back to eager would time eager as fuseforge."""
    path = _problem(tmp_path, "nonzero", "return torch.nonzero(x > 0).float()")
    code, err = _run(["run", str(path), "--against", "eager"], capsys)
    assert code == 2 and "static shapes" in err and len(err.strip().splitlines()) == 1, err


def test_a_bench_row_carries_the_one_line_reason(tmp_path):
    import argparse

    from fuseforge.harness import bench

    path = _problem(tmp_path, "nonzero", "return torch.nonzero(x > 0).float()")
    args = argparse.Namespace(against="eager", seeds=1, precision="fp32", mode=None, timeout=120, eager_convs="default")
    row = bench.run_problem(path, args)
    assert row["correct"] is False
    assert row["error"].startswith("node nonzero (aten.nonzero.default): dynamic size"), row["error"]
    assert f"(at nonzero.py:{FORWARD_LINE} in forward" in row["error"] and "--verbose" not in row["error"]
