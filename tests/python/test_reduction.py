"""Reduction kernels without a GPU: the dev problems' plans (which reductions
became generated kernels), the plans of the GPU test's cases, and ptxas's
report for their kernels (no register spills)."""

import re

import pytest
import torch

import test_scan_gpu
from conftest import ROOT
from fuseforge._native import core
from fuseforge.capture import capture
from fuseforge.harness.problem import load_problem
from fuseforge.runtime.options import compile_ir
from test_reduction_gpu import CASES, build_case

DEV = ROOT / "benchmarks" / "problems" / "dev"

# Each dev problem with reductions: the ops its reduction kernels compute (in
# plan order), and the library ops left (besides views and convolutions).
EXPECTED = {
    "rmsnorm_manual": ([["mean"]], []),
    "softmax_rows": ([["softmax"]], []),
    "logsumexp_mean": ([["logsumexp"], ["mean"]], []),
    "max_and_argmax": ([["amax", "argmax"]], []),
    "layernorm_residual_dropout_eval": ([["layer_norm"]], []),
    "classifier_head": ([["mean"], ["sum"], ["log_softmax"]], []),  # the sum of the linear's K slices (split_gemm_k)
    "linear_gelu_layernorm": ([["layer_norm"]], []),
    "conv2d_groupnorm_silu": ([["var", "mean"]], []),
    "conv2d_instancenorm_scale": ([["var", "mean"]], []),  # the weight and bias repeated per sample: prepare steps
    "conv2d_channel_max_sigmoid": ([["amax"]], []),
    "convtranspose2d_softmax_channels": ([["softmax"]], []),
    # Statistics of 48 channels of 2.4M elements: partials per image and
    # channel, then the channels' (split_long_reduction), with running stats.
    "conv2d_batchnorm_train_scale": ([["mean", "var"], ["mean", "var", "mean"]], []),
    "convtranspose3d_layernorm_pool": ([["layer_norm"]], []),
    "conv3d_softmax_maxpool": ([], []),  # the softmax runs in the pool kernel
    "conv2d_avgpool_sigmoid_sum": ([["sum"], ["sum"]], []),  # 128 sums split in two
    # Three train-mode batch norms, each split (the first, 32 channels of 2M
    # elements, was two library calls before), then the global average pool.
    "small_convnet": ([["mean", "var"], ["mean", "var", "mean"]] * 3 + [["mean"]], []),
    "conv3d_relu_maxpool": ([], []),
    "cumsum_rows": ([], []),
    "scans_exclusive_reverse": ([], []),  # no flips left: the cumprod scans from the rows' end
}
# The ops of each pool kernel (plan order): the pointwise work before the pool
# runs at its window taps, the work after it on the pooled value.
POOLS = {
    "convtranspose3d_layernorm_pool": [["avg_pool", "silu"]],  # the layer norm's apply is its own kernel's epilogue
    "conv3d_softmax_maxpool": [["add", "softmax", "max_pool"]],  # the bias and the softmax at each tap
    "conv2d_avgpool_sigmoid_sum": [["avg_pool"]],  # the sigmoid is the sum's prologue
    "small_convnet": [["sub", "mul", "mul", "add", "relu", "max_pool"]] * 2,  # batch norm's apply and the relu
    "conv3d_relu_maxpool": [["add", "relu", "max_pool"]],  # the conv's bias
}
# The ops of each scan kernel: the pointwise work that makes the scanned value
# and that reads the scan's result.
SCANS = {
    "cumsum_rows": [["mul", "cumsum"]],
    "scans_exclusive_reverse": [["cumsum", "sub", "mul", "add", "cumprod"]],  # x read once
}
_REDUCTIONS = {
    "sum",
    "mean",
    "amax",
    "amin",
    "prod",
    "var",
    "any",
    "argmax",
    "argmin",
    "logsumexp",
    "softmax",
    "log_softmax",
    "layer_norm",
}
_FREE = {"view", "permute", "expand", "squeeze", "unsqueeze", "convolution"}


def _plan(model, inputs, name):
    return compile_ir(capture(model, inputs, name=name).text, arch=90).plan


@pytest.mark.parametrize("name", list(EXPECTED))
def test_dev_problem_reductions_are_kernels(name):
    mod = load_problem(DEV / f"{name}.py")
    torch.manual_seed(0)
    plan = _plan(mod.Model(*mod.get_init_inputs()), mod.get_inputs(), name)
    steps = [*plan.prepare, *plan.run]
    kernels = [plan.kernels[s.kernel] for s in steps if s.kind == "launch"]
    reductions = [[n.op for n in k.nodes if n.op in _REDUCTIONS] for k in kernels if k.kind == "reduction"]
    library = [s.op for s in steps if s.kind in ("call", "view") and s.op not in _FREE]
    assert (reductions, library) == EXPECTED[name]
    assert [[n.op for n in k.nodes] for k in kernels if k.kind == "pool"] == POOLS.get(name, [])
    assert [[n.op for n in k.nodes] for k in kernels if k.kind == "scan"] == SCANS.get(name, [])


@pytest.mark.parametrize("name", list(CASES))
def test_gpu_cases_plan_reduction_kernels(monkeypatch, name):
    """The GPU test's cases (smaller here: the plan does not depend on the
    values) each run their reductions as kernels, and those build without
    register spills for sm_90."""
    monkeypatch.setenv("FUSEFORGE_DISABLE_CACHE", "1")  # a disk-cache hit carries no ptxas log
    model, xs = build_case(name, "cpu")
    plan = _plan(model, xs, name)
    kernels = [k for k in plan.kernels if k.kind == "reduction"]
    assert kernels and not [s for s in plan.run if s.kind == "call" and s.op in _REDUCTIONS]
    for k in kernels:
        is_cubin, _, log = core.nvrtc_compile(k.translation_unit, k.name, 90, options=["-Xptxas=-v"])
        assert is_cubin, log
        # A few bytes at most: the IEEE division's slow path (Welford's push
        # divides, as ATen's does) saves registers around its call. Kernels
        # holding inputs partly in shared memory run at 128 registers (two
        # blocks per SM), where ptxas spills 16 words around the sweep for the
        # chunk's max; the 4096x32768 softmax measured 0.301 ms with 80 bytes.
        limit = 64 if k.shared_bytes > 0 else 16
        spills = re.findall(r"(\d+) bytes spill stores", log)
        assert spills and all(int(s) <= limit for s in spills), (k.name, log)


@pytest.mark.parametrize("name", list(test_scan_gpu.CASES))
def test_gpu_scan_cases_plan_scan_kernels(monkeypatch, name):
    """The scan GPU test's cases each run their cumsum as a scan kernel, which
    builds without register spills for sm_90."""
    monkeypatch.setenv("FUSEFORGE_DISABLE_CACHE", "1")  # a disk-cache hit carries no ptxas log
    model, xs = test_scan_gpu.build_case(name, "cpu")
    plan = _plan(model, xs, name)
    kernels = [k for k in plan.kernels if k.kind == "scan"]
    assert len(kernels) == 1 and not [s for s in plan.run if s.kind == "call"]
    is_cubin, _, log = core.nvrtc_compile(kernels[0].translation_unit, kernels[0].name, 90, options=["-Xptxas=-v"])
    assert is_cubin, log
    spills = re.findall(r"(\d+) bytes spill stores", log)
    assert spills and all(int(s) == 0 for s in spills), (kernels[0].name, log)


@pytest.mark.parametrize("arch,length", [(80, 16384), (90, 131072)])
def test_longest_masked_scans_build_without_spills(monkeypatch, arch, length):
    """The longest rows of cumsum(x * mask) the scan scheduler takes on (32
    elements a thread of two inputs: its register budget) build without
    spills; one element more and the product is a kernel of its own."""
    monkeypatch.setenv("FUSEFORGE_DISABLE_CACHE", "1")

    def plan(n):
        return compile_ir(
            f"""graph @g(%x: f32[4,{n}], %m: f32[4,{n}]) {{
  %0 = mul(%x, %m) : f32[4,{n}]
  %1 = cumsum(%0) {{dim=1}} : f32[4,{n}]
  return %1
}}""",
            arch=arch,
        ).plan

    kernels = [k for k in plan(length).kernels if k.kind == "scan"]
    assert len(kernels) == 1 and [n.op for n in kernels[0].nodes] == ["mul", "cumsum"]
    is_cubin, _, log = core.nvrtc_compile(kernels[0].translation_unit, kernels[0].name, arch, options=["-Xptxas=-v"])
    assert is_cubin and re.findall(r"(\d+) bytes spill stores", log) == ["0"], log
    longer = plan(length + 1)
    assert [[n.op for n in k.nodes] for k in longer.kernels] == [["mul"], ["cumsum"]]


@pytest.mark.parametrize("bias", [False, True], ids=["norm", "conv_bias_and_norm"])
def test_channels_last_group_norm_rows_stay_in_registers_without_spills(monkeypatch, bias):
    """Group norm over a channels-last conv result's [N, G, C/G, H*W] view:
    16-byte loads of 4 channels, the output stored element by element in its
    contiguous layout, a row of 32768 elements held in registers also when
    the conv's bias joins the kernel (per-channel inputs take one vector's
    registers), and the kernel builds for sm_90 without spills (before, the
    per-channel inputs took a register per item and element and spilled)."""
    monkeypatch.setenv("FUSEFORGE_DISABLE_CACHE", "1")
    x = "%a" if bias else "%y"
    add = "  %a = add(%y, %cb) : f32[32,32,8,4096]\n" if bias else ""
    plan = compile_ir(
        f"""graph @gn(%y: f32[32,32,8,4096]{{1048576,8,1,256}}, %cb: f32[1,32,8,1], %w: f32[1,32,8,1], %b: f32[1,32,8,1]) {{
{add}  %0 = var({x}) {{correction=0, dims=[2, 3], keepdim=true}} : f32[32,32,1,1]
  %1 = mean({x}) {{dims=[2, 3], keepdim=true}} : f32[32,32,1,1]
  %2 = add(%0, 1e-05) : f32[32,32,1,1]
  %3 = rsqrt(%2) : f32[32,32,1,1]
  %4 = sub({x}, %1) : f32[32,32,8,4096]
  %5 = mul(%4, %3) : f32[32,32,8,4096]
  %6 = mul(%5, %w) : f32[32,32,8,4096]
  %7 = add(%6, %b) : f32[32,32,8,4096]
  %8 = silu(%7) : f32[32,32,8,4096]
  return %8
}}""",
        arch=90,
    ).plan
    (k,) = plan.kernels
    assert "held in registers" in k.source and k.vector_width == 4, k.source[:400]
    assert "out0[base_out0 + e0 + e1 * 4096 + k * static_cast<index_t>(4096)]" in k.source
    is_cubin, _, log = core.nvrtc_compile(k.translation_unit, k.name, 90, options=["-Xptxas=-v"])
    assert is_cubin and re.findall(r"(\d+) bytes spill stores", log) == ["0"], log
