"""GEMM kernel plans on the CPU: opt-in switch, epilogue fusion, and the ATen
fallback a GEMM step takes on the GPU for misaligned views or a kernel that
did not compile."""

import pytest
import torch

from fuseforge._native import core
from fuseforge.capture import capture
from fuseforge.runtime.executor import Executor
from fuseforge.runtime.options import compile_ir


class Linear(torch.nn.Module):
    def __init__(self, beta: float = 1.0, epilogue: bool = False):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(6, 12))
        self.bias = torch.nn.Parameter(torch.randn(6))
        self.beta = beta
        self.epilogue = epilogue

    def forward(self, x):
        y = torch.addmm(self.bias, x, self.weight.t(), beta=self.beta)
        return torch.sigmoid(y) * 2.0 + y if self.epilogue else y


def _plan(model, x, gemm):
    return compile_ir(capture(model, [x], name="linear").text, gemm=gemm).plan


def _gemms(model, x):
    return [k for k in compile_ir(capture(model, [x], name="l").text).plan.kernels if k.kind == "gemm"]


def test_gemm_kernels_default_to_f32_only(monkeypatch):
    """f32 matmuls become GEMM kernels by default; f16 ones only with
    FUSEFORGE_GEMM=1; FUSEFORGE_GEMM=0 turns them all off; a typo is an error."""
    torch.manual_seed(0)
    x = torch.randn(5, 12)
    monkeypatch.delenv("FUSEFORGE_GEMM", raising=False)
    assert _gemms(Linear(), x)
    assert not _gemms(Linear().half(), x.half())
    monkeypatch.setenv("FUSEFORGE_GEMM", "1")
    assert _gemms(Linear().half(), x.half())
    monkeypatch.setenv("FUSEFORGE_GEMM", "0")
    assert not _gemms(Linear(), x)
    monkeypatch.setenv("FUSEFORGE_GEMM", "yes")
    with pytest.raises(ValueError, match="FUSEFORGE_GEMM is 'yes'"):
        _gemms(Linear(), x)


def test_op_by_op_views_aliases_and_matches_aten():
    """On the GPU a transposed weight reaches the kernel as the weight itself
    (the plan makes it an alias: no view step runs); a kernel run op by op
    (no GPU, or a GEMM kernel that did not compile) views the weight's memory
    with the alias's strides, and matches ATen."""
    torch.manual_seed(0)
    x = torch.randn(5, 12)
    for beta, epilogue in ((1.0, False), (0.0, False), (0.5, True)):
        model = Linear(beta, epilogue)
        plan = _plan(model, x, gemm="all")
        (k,) = [k for k in plan.kernels if k.kind == "gemm"]
        assert len(k.nodes) == (4 if epilogue else 1) and len(plan.kernels) == 1
        assert len(k.inputs) == 3  # x, weight.T, bias (passed even when beta = 0)
        (alias,) = [i for i in k.inputs if i.buffer != i.memory]
        assert plan.buffers[alias.buffer].role == "alias" and plan.buffers[alias.memory].name == "weight"
        assert not [s for s in plan.run if s.kind == "view"]
        executor = Executor(plan, torch.device("cpu"))
        (out,), _ = executor([x, model.weight.detach(), model.bias.detach()])
        torch.testing.assert_close(out, model(x).detach())


def test_autotune_times_once_and_caches_the_choice(monkeypatch, tmp_path):
    from fuseforge.runtime import autotune

    monkeypatch.setenv("FUSEFORGE_CACHE_DIR", str(tmp_path))
    timed = []

    def timer(fn):
        timed.append(fn)
        return fn()

    names = ["a_128x128", "a_128x64", "a_64x64"]
    runs = [lambda: 3.0, lambda: 1.0, lambda: 2.0]
    assert autotune.choose("sm90-k", names, runs, timer) == 1
    assert len(timed) == 3
    assert autotune.load() == {"sm90-k": "a_128x64"}
    assert autotune.choose("sm90-k", names, runs, timer) == 1 and len(timed) == 3  # cached: not timed again
    # A cached name that is no candidate any more is timed afresh.
    assert autotune.choose("sm90-k", ["b", "c"], [lambda: 5.0, lambda: 4.0], timer) == 1
    (tmp_path / "autotune.json").write_text("{not json")
    assert autotune.load() == {}


def test_autotune_reads_its_file_again_only_after_it_changed(monkeypatch, tmp_path):
    """A compile asks the cache once per kernel or conv: the file this process
    wrote is not parsed again, one another process renamed into place is."""
    import json
    import os

    from fuseforge.runtime import autotune

    monkeypatch.setenv("FUSEFORGE_CACHE_DIR", str(tmp_path))
    parsed = []
    real_loads = json.loads
    monkeypatch.setattr(autotune.json, "loads", lambda text: parsed.append(text) or real_loads(text))
    autotune.store("sm90-a", "x_64x64")
    for _ in range(5):
        assert autotune.load() == {"sm90-a": "x_64x64"}
    assert parsed == []
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"sm90-a": "y_64x64"}, indent=1, sort_keys=True))  # as long as ours
    os.replace(other, tmp_path / "autotune.json")
    assert autotune.load() == {"sm90-a": "y_64x64"} and autotune.load() == {"sm90-a": "y_64x64"}
    assert len(parsed) == 1


def test_autotune_choices_name_what_a_candidate_is_not_its_kernel_number():
    from fuseforge.runtime import autotune

    assert autotune.label("ff_gemm_addmm_relu_3xtf32_128x64_17") == "ff_gemm_addmm_relu_3xtf32_128x64"
    assert autotune.label("ff_conv2d_add_relu_3xtf32_sm90_205") == autotune.label("ff_conv2d_add_relu_3xtf32_sm90_212")
    assert autotune.label("library") == "library"


def test_autotune_plans_list_the_other_tiles(monkeypatch):
    torch.manual_seed(0)
    x = torch.randn(512, 12)
    monkeypatch.setenv("FUSEFORGE_GEMM", "1")
    monkeypatch.setenv("FUSEFORGE_AUTOTUNE", "1")
    (k,) = compile_ir(capture(Linear(epilogue=True), [x], name="l").text).plan.kernels
    assert k.kind == "gemm" and len(k.variants) == 2
    names = {k.name} | {v.name for v in k.variants}
    assert len(names) == 3 and all("3xtf32" in n for n in names)
    for v in k.variants:
        is_cubin, size, log = core.nvrtc_compile(v.translation_unit, v.name, 90, cutlass=True)
        assert is_cubin and size > 0, log
    monkeypatch.delenv("FUSEFORGE_AUTOTUNE")
    (k,) = compile_ir(capture(Linear(epilogue=True), [x], name="l").text).plan.kernels
    assert len(k.variants) == 0


def test_tf32_precision_changes_only_f32_gemm_math(monkeypatch):
    """Under precision="tf32" f32 matmuls stay cuBLAS calls by default (TF32
    there) and become plain-TF32 kernels with gemm="all"; an unknown precision
    is a clear error, and precision_context restores the global setting."""
    from fuseforge.runtime.module import optimize
    from fuseforge.runtime.precision import precision_context

    monkeypatch.delenv("FUSEFORGE_GEMM", raising=False)
    x = torch.randn(5, 12)
    text = capture(Linear(), [x], name="l").text
    assert not [k for k in compile_ir(text, precision="tf32").plan.kernels if k.kind == "gemm"]
    (k,) = [k for k in compile_ir(text, gemm="all", precision="tf32").plan.kernels if k.kind == "gemm"]
    assert "_tf32_" in k.name and "FastF32" not in k.source
    with pytest.raises(ValueError, match="precision 'bf16' is not available"):
        compile_ir(text, precision="bf16")
    with pytest.raises(ValueError, match="precision 'bf16' is not available"):
        optimize(Linear(), precision="bf16")
    before = torch.get_float32_matmul_precision()
    with pytest.raises(RuntimeError, match="inside"):
        with precision_context("tf32"):
            assert torch.backends.cuda.matmul.allow_tf32
            raise RuntimeError("inside")
    assert torch.get_float32_matmul_precision() == before
