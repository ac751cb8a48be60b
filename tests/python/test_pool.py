"""Pool kernels without a GPU: the GPU test's cases (smaller inputs: the plan
does not depend on the values) each run their pooling as a generated kernel
with the pointwise work around it, and those kernels build for sm_90."""

import pytest

from conftest import ROOT
from fuseforge._native import core
from fuseforge.capture import capture
from fuseforge.harness.problem import load_problem, problem_name
from fuseforge.runtime.options import compile_ir
from test_pool_gpu import CASES, build_case

# The ops each case's pool kernel computes.
FUSED = {
    "conv_relu_maxpool": ["add", "relu", "max_pool"],  # the conv's bias, at every tap
    "conv3d_relu_maxpool_channels_last": ["add", "relu", "max_pool"],
    "bias_maxpool_padded_dilated": ["add", "max_pool", "sigmoid"],
    "avgpool_silu": ["avg_pool", "silu"],
    "avgpool_padded_excluded": ["mul", "avg_pool"],
    "avgpool_divisor_1d": ["avg_pool", "add"],
    "maxpool1d_half": ["tanh", "max_pool"],
    "conv3d_softmax_maxpool": ["add", "softmax", "max_pool"],
    "log_softmax_scale_avgpool_channels_last": ["log_softmax", "mul", "avg_pool"],
    # avg_pool1d's ATen form (unsqueeze, a [1, k] pool, squeeze) pools x itself.
    "avgpool1d_minus_maxpool1d": ["avg_pool", "max_pool", "sub"],
    "relu_avg_max_pool2d_sigmoid_channels_last": ["relu", "avg_pool", "max_pool", "add", "sigmoid"],
    "avg_max_pool3d_ceil_product": ["avg_pool", "max_pool", "mul"],
}


@pytest.mark.parametrize("name", list(CASES))
def test_pool_cases_plan_one_fused_kernel(monkeypatch, name):
    monkeypatch.setenv("FUSEFORGE_DISABLE_CACHE", "1")
    model, xs = build_case(name, "cpu")
    plan = compile_ir(capture(model, xs, name=name).text, arch=90).plan
    pools = [k for k in plan.kernels if k.kind == "pool"]
    assert [[n.op for n in k.nodes] for k in pools] == [FUSED[name]]
    assert not [s for s in plan.run if s.kind == "call" and s.op != "convolution"]
    is_cubin, _, log = core.nvrtc_compile(pools[0].translation_unit, pools[0].name, 90)
    assert is_cubin, log


def test_avg_and_max_pool1d_of_one_signal_are_one_kernel(monkeypatch):
    """benchmarks/problems/dev/pool1d_long_signal.py, avg_pool1d(x) -
    max_pool1d(x) with the same windows: one kernel reads x once, pools both
    and writes only the difference (two kernels wrote and read back the
    average); it compiles for sm_90."""
    monkeypatch.setenv("FUSEFORGE_DISABLE_CACHE", "1")
    path = ROOT / "benchmarks" / "problems" / "dev" / "pool1d_long_signal.py"
    mod = load_problem(path)
    text = capture(mod.Model(*mod.get_init_inputs()), mod.get_inputs(), name=problem_name(path)).text
    plan = compile_ir(text, "fp32", 90).plan
    (k,) = plan.kernels
    assert (k.kind, k.name) == ("pool", "ff_pool_avg_pool_max_pool_sub_0")
    assert [n.op for n in k.nodes] == ["avg_pool", "max_pool", "sub"]
    assert [s.kind for s in plan.run] == ["launch"], str(plan)
    is_cubin, _, log = core.nvrtc_compile(k.translation_unit, k.name, 90)
    assert is_cubin, log
