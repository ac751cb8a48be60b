"""`fuseforge run` without a GPU: the optimized plan runs on the CPU and is
judged like the GPU path (within 1e-4 of eager, or no farther from fp64 than
twice eager where eager itself is far from it)."""

import json
import re
import textwrap

import pytest
import torch

from fuseforge.harness import cli

PROBLEM = textwrap.dedent("""
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self, n, k):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(n, k))

        def forward(self, x):
            return (torch.matmul(x, self.weight.T) / 2).sum(dim=1, keepdim=True) * 1.5

    def get_inputs():
        return [torch.rand(64, 2048)]

    def get_init_inputs():
        return [2048, 2048]
""")


def test_cpu_run_checks_a_rewritten_sum_against_fp64(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("with a GPU, run takes the GPU path (test_gpu.py)")
    path, out = tmp_path / "gemm_sum.py", tmp_path / "row.json"
    path.write_text(PROBLEM)
    assert cli.main(["run", str(path), "--json", str(out)]) == 0
    row = json.loads(out.read_text())
    # The sum over the GEMM became a GEMV in f64: closer to fp64 than eager.
    assert row["correct"] and row["max_err_vs_fp64"] <= row["eager_err_vs_fp64"]
    assert row["accuracy_rule"] in ("eager", "fp64") and row["verdict"].startswith("correct ("), row


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error given without a GPU")
def test_compile_only_without_a_gpu_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "p.py"
    path.write_text(PROBLEM)
    assert cli.main(["run", str(path), "--compile-only"]) == 2
    assert "--compile-only needs a CUDA GPU" in capsys.readouterr().err


LINEAR = textwrap.dedent("""
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(1024, 256)

        def forward(self, x):
            return torch.relu(self.fc(x))

    def get_inputs():
        return [torch.randn(8192, 1024)]

    def get_init_inputs():
        return []
""")


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU, explain shows that GPU's kernels")
def test_explain_shows_the_passes_and_the_kernels_of_the_checked_arch(tmp_path, capsys):
    path = tmp_path / "linear_relu.py"
    path.write_text(LINEAR)
    assert cli.main(["explain", str(path)]) == 0
    out = capsys.readouterr().out
    assert "IR as captured" in out
    # Without a GPU: the kernels of CPU_CHECK_ARCH (sm_90), so the Hopper GEMM with relu fused,
    # shown in the plan's text form (unwrapped), reading the transposed weight in place.
    assert "  kernel @ff_gemm_addmm_relu_3xtf32_sm90_0 gemm " in out, out
    assert "    launch @ff_gemm_addmm_relu_3xtf32_sm90_0 (%2) <- (%x relayout, %0 relayout, %fc.bias relayout)\n" in out
    assert "    %0: f32[1024,256]{1,1024} alias %fc.weight\n" in out


BATCHED = textwrap.dedent("""
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(256, 256)

        def forward(self, x, idx):
            return torch.sigmoid(self.fc(x)) * 2 + idx.unsqueeze(1)

    def get_inputs():
        return [torch.randn(65536, 256), torch.randint(0, 5, (65536,))]

    def get_init_inputs():
        return []
""")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU check")
def test_cpu_run_checks_the_same_kernels_at_a_reduced_batch(tmp_path):
    from fuseforge.harness import cpu_check

    path, out = tmp_path / "batched.py", tmp_path / "row.json"
    path.write_text(BATCHED)
    assert cli.main(["run", str(path), "--json", str(out)]) == 0
    row = json.loads(out.read_text())
    rows = cpu_check.CHECK_ELEMENTS // 257  # per row: 256 floats of x and one index
    assert row["checked_at"] == {"rows": rows, "of": 65536}, row["checked_at"]
    assert row["correct"] and row["checked_kernels_same"]


def test_inputs_are_cut_only_along_their_shared_leading_dimension():
    from fuseforge.harness import cpu_check

    mod = type("M", (), {})()
    mod.get_inputs = lambda: [torch.randn(1000, 3), torch.randint(2, 7, (1000,)), torch.full((1000, 2), 4.0), 0.5]
    with torch.device("meta"):
        meta = mod.get_inputs()
    size = cpu_check.check_size(meta, budget=60)
    assert (size.full, size.rows) == (1000, 10)  # 6 elements per row
    x, i, f, s = cpu_check.reduced_inputs(mod, 0, size, meta)
    assert x.shape == (10, 3) and i.shape == (10,) and f.shape == (10, 2) and s == 0.5
    assert int(i.min()) >= 2 and int(i.max()) < 7 and bool((f == 4.0).all())  # the draws keep their ranges
    # Inputs not drawn by a factory (here a reshape of arange) cannot be cut: full size.
    mod.get_inputs = lambda: [torch.arange(3000.0).reshape(1000, 3)]
    with torch.device("meta"):
        meta = mod.get_inputs()
    assert cpu_check.reduced_inputs(mod, 0, cpu_check.check_size(meta, budget=60), meta) is None
    # Leading dimensions that differ are not a batch.
    assert cpu_check.check_size([torch.empty(4, 2, device="meta"), torch.empty(5, device="meta")]) is None


def test_a_shared_length_that_is_not_a_batch_is_not_cut():
    """Vectors as long as a square matrix's rows that broadcast along its
    columns share its leading length: cutting it would fail in the model."""
    from fuseforge.harness import cpu_check

    class RowsAndColumns(torch.nn.Module):
        def forward(self, x, row, col):
            return x * row[None, :] + col[:, None]

    class Rows(torch.nn.Module):
        def forward(self, x, col):
            return x + col[:, None]

    square = [
        torch.empty(1000, 1000, device="meta"),
        torch.empty(1000, device="meta"),
        torch.empty(1000, device="meta"),
    ]
    assert cpu_check.check_size(square, budget=6000) == cpu_check.CheckSize(1000, 5)  # without the model: cut
    assert cpu_check.check_size(square, budget=6000, model=RowsAndColumns()) is None
    rows = [torch.empty(1000, 8, device="meta"), torch.empty(1000, device="meta")]
    assert cpu_check.check_size(rows, budget=90, model=Rows()) == cpu_check.CheckSize(1000, 10)


TWO_OUTPUTS = textwrap.dedent("""
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(64, 32)

        def forward(self, x):
            y = self.fc(x)
            return torch.relu(y), torch.sigmoid(y).sum(dim=0)

    def get_inputs():
        return [torch.randn(16, 64)]

    def get_init_inputs():
        return []
""")


def _verdict(out):
    """The CPU check's verdict: its lines from 'optimized plan' to the closing parenthesis."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("optimized plan on the CPU"))
    end = next(i for i in range(start, len(lines)) if lines[i].rstrip().endswith(")"))
    return lines[start : end + 1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU check's summary")
def test_cpu_run_prints_a_summary_without_the_ir_unwrapped_with_counted_nouns(tmp_path, capsys):
    path = tmp_path / "two_outputs.py"
    path.write_text(TWO_OUTPUTS)
    assert cli.main(["run", str(path)]) == 0
    out = capsys.readouterr().out
    assert "IR as captured" not in out and "addmm(" not in out, out
    # The GEMM kernel (relu fused) and the reduction with sigmoid as its prologue.
    assert "2 kernels, 0 library calls" in out, out
    verdict = _verdict(out)
    # Piped output is never wrapped: the verdict is one line, longer than a terminal's 80 columns.
    assert len(verdict) == 1 and len(verdict[0]) > 80, verdict
    # The verdict names the rule that held, then the errors behind it.
    assert ": correct (within 1e-4 of eager); max abs err vs eager " in verdict[0], verdict
    assert ", vs fp64 " in verdict[0] and ", eager's " in verdict[0], verdict
    assert "(2 kernels, the same as at full size; 0 library calls)" in verdict[0], verdict


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU check's summary")
def test_cpu_run_with_ir_prints_it_and_counts_one_of_each_in_the_singular(tmp_path, capsys, monkeypatch):
    path = tmp_path / "two_outputs.py"
    path.write_text(TWO_OUTPUTS)
    monkeypatch.setenv("FUSEFORGE_GEMM", "off")  # the matmul becomes the one library call
    assert cli.main(["run", str(path), "--ir"]) == 0
    out = capsys.readouterr().out
    assert "IR as captured" in out and "IR after passes" in out
    # IR lines as they are: whole, not wrapped at 80 columns.
    assert "  %1 = addmm(%fc.bias, %x, %0) : f32[16,32]\n" in out, out
    assert "1 kernel, 1 library call\n" in out, out
    assert _verdict(out)[0].endswith(" (1 kernel, the same as at full size; 1 library call)"), out
    assert not re.search(r"\b1 (kernels|library calls)\b", out), out


def test_counted_nouns():
    from fuseforge.diagnostics import counted

    assert [counted(n, "kernel") for n in (0, 1, 2)] == ["0 kernels", "1 kernel", "2 kernels"]
    assert counted(1, "library call") == "1 library call" and counted(3, "library call") == "3 library calls"
    assert counted(2, "matrix", "matrices") == "2 matrices"


@pytest.mark.skipif(torch.cuda.is_available(), reason="without a GPU, explain shows the kernels of CPU_CHECK_ARCH")
def test_missing_cutlass_headers_are_one_warning_and_explain_lists_the_matmuls(tmp_path, capsys, caplog, monkeypatch):
    from fuseforge import _native
    from fuseforge.runtime import options

    monkeypatch.setattr(_native, "cutlass_include_dir", lambda: None)  # as without nvidia-cutlass
    monkeypatch.setattr(options, "_warned_gemm_headers", False)
    path = tmp_path / "linear_relu.py"
    path.write_text(LINEAR)
    with caplog.at_level("WARNING", logger="fuseforge"):
        assert cli.main(["explain", str(path)]) == 0
        assert cli.main(["explain", str(path)]) == 0
    warnings = [r.getMessage() for r in caplog.records if r.name == "fuseforge"]
    assert warnings == [
        "fuseforge: CUTLASS headers not found (nvidia-cutlass not installed): f32 matmuls run as library calls; "
        "pip install nvidia-cutlass==4.2.0.0"
    ], warnings
    out = capsys.readouterr().out
    assert "ff_gemm" not in out  # the matmul is a library call in the plan
    section = out[out.index("matmuls without GEMM kernels") :]
    assert "CUTLASS headers not found (nvidia-cutlass not installed); pip install nvidia-cutlass==4.2.0.0" in section
    assert "(1 matmul):\n  %1 = addmm(%fc.bias, %x, %0) : f32[8192,256]\n" in section, section


def test_a_model_whose_constructor_reads_tensor_values_is_built_for_the_full_size_plan():
    """Widths computed with torch and read back by tolist() cannot be
    computed on the meta device: the model is built on the CPU and moved."""
    from fuseforge.harness import cpu_check

    class Widths(torch.nn.Module):
        def __init__(self):
            super().__init__()
            widths = (torch.tensor([1.0, 2.0]) * 8).int().tolist()
            self.layers = torch.nn.Sequential(*[torch.nn.Linear(4, w) for w in widths[:1]])

        def forward(self, x):
            return self.layers(x)

    mod = type("M", (), {})()
    mod.Model, mod.get_init_inputs = Widths, list
    mod.get_inputs = lambda: [torch.randn(16, int(torch.tensor(4).item()))]
    model, (x,) = cpu_check.meta_model(mod, None)
    assert model.layers[0].weight.device.type == "meta" and model.layers[0].weight.shape == (8, 4)
    assert x.device.type == "meta" and x.shape == (16, 4)
