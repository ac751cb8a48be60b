"""Every kernel generated for every problem compiles with NVRTC for sm_90 (no
GPU needed), GEMM kernels included (CUTLASS headers from the pinned wheel; the
Hopper wgmma kernels for sm_90a), and the optimized plan agrees with the
captured graph's meaning."""

import os

import pytest
import torch

from conftest import PROBLEMS, kernel_convs
from fuseforge._native import core
from fuseforge.capture import capture
from fuseforge.harness.problem import load_problem, problem_name
from fuseforge.runtime.options import compile_ir, compile_options


def _capture(path):
    mod = load_problem(path)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs())
    return capture(model, mod.get_inputs(), name=problem_name(path))


def test_cutlass_headers_are_found():
    """CI installs the pinned CUTLASS headers: without them matmuls would silently stay ATen calls."""
    opts = core.cutlass_options()
    assert any("cutlass_library" in o for o in opts), opts
    assert len(opts) >= 2, opts  # and a folder with libcu++'s cuda/std


def _plan(text, **kw):
    return compile_ir(text, **kw).plan


class _UnrolledLoop(torch.nn.Module):
    """A Python loop over time steps: its graph repeats one step's ops."""

    def forward(self, x, h):
        for t in range(x.shape[0]):
            h = torch.tanh(x[t] * 0.5 + h.mean(0, keepdim=True) * h)
        return h


def test_kernels_with_the_same_code_compile_once(monkeypatch):
    """The steps of an unrolled loop get kernels that differ in name and in the
    IR their comments quote, not in code: each distinct kernel compiles once
    (NVRTC's own count), and every step still gets a kernel to launch."""
    monkeypatch.setenv("FUSEFORGE_DISABLE_CACHE", "1")
    text = capture(_UnrolledLoop(), [torch.randn(6, 256, 512), torch.randn(256, 512)], name="loop").text
    kernels = _plan(text, arch=90).kernels
    keys = [k.compile_key for k in kernels]
    assert len(set(keys)) < len(kernels) and len({k.name for k in kernels}) == len(kernels)
    assert all(k.name not in key for k, key in zip(kernels, keys))
    before = core.nvrtc_compile_count()
    loaded = core.load_kernels(kernels, 90)
    assert core.nvrtc_compile_count() - before == len(set(keys))
    assert [type(k).__name__ for k in loaded] == ["LaunchableKernel"] * len(kernels), loaded
    # Code that differs in anything but comments and the name keeps its own key.
    scaled = capture(_UnrolledLoop(), [torch.randn(6, 256, 384), torch.randn(256, 384)], name="loop").text
    assert not set(keys) & {k.compile_key for k in _plan(scaled, arch=90).kernels}


def test_the_installed_package_compiles_kernels_in_worker_processes():
    """pip install puts fuseforge-nvrtc beside the extension, and importing
    fuseforge registers it: a plan's kernels compile in parallel."""
    worker = core.compile_worker()
    assert os.path.dirname(worker) == os.path.dirname(core.__file__) and os.access(worker, os.X_OK), worker


def test_compile_jobs_setting_is_refused_unless_a_positive_count(monkeypatch):
    kernels = _plan(capture(_UnrolledLoop(), [torch.randn(2, 8, 16), torch.randn(8, 16)], name="loop").text).kernels
    monkeypatch.setenv("FUSEFORGE_COMPILE_JOBS", "many")
    with pytest.raises(ValueError, match="FUSEFORGE_COMPILE_JOBS='many': expected a positive number"):
        core.load_kernels(kernels, 90)
    monkeypatch.setenv("FUSEFORGE_COMPILE_JOBS", "1")  # one at a time, in this process
    assert all(not isinstance(k, str) for k in core.load_kernels(kernels, 90))


@pytest.mark.parametrize("path", PROBLEMS, ids=problem_name)
def test_every_kernel_compiles_for_sm90(path):
    text = _capture(path).text
    plan = _plan(text, gemm="all", arch=90)
    # The plan covers the graph: each output is produced by some step.
    produced = set(plan.inputs)
    for step in [*plan.prepare, *plan.run]:
        produced |= set(plan.kernels[step.kernel].outputs if step.kind == "launch" else step.results)
    assert set(plan.outputs) <= produced
    # Where a Hopper kernel replaced a CUTLASS one, the CUTLASS one (other GPUs) compiles too.
    other = _plan(text, gemm="all").kernels
    for plan_kernels in (plan.kernels, [other[i] for i, k in enumerate(plan.kernels) if k.sm90a]):
        for k, loaded in zip(plan_kernels, core.load_kernels(plan_kernels, 90)):
            assert not isinstance(loaded, str), (k.name, loaded)
            assert loaded.name == k.name and k.name in k.source


def test_hopper_gets_wgmma_kernels_for_k_contiguous_f32_matmuls():
    """On sm_90 the f32 linears and q @ k.T-style bmms with long sums run the
    wgmma 3xTF32 kernel; f16, N-contiguous B (p @ v) and short K keep CUTLASS's."""
    hopper = {
        "gemm_sigmoid_scaling_residual_add",
        "mlp_residual",
        "linear_gelu_layernorm",
        "linear_swish_sum",
        "bmm_transposed_bias",
    }
    for path in [p for p in PROBLEMS if p.stem in hopper | {"linear_relu_half", "attention_manual"}]:
        gemms = [k for k in _plan(_capture(path).text, arch=90, gemm="all").kernels if k.kind == "gemm"]
        assert gemms and all(k.sm90a == (path.stem in hopper) for k in gemms), (path.stem, [k.name for k in gemms])


def test_matmuls_become_gemm_kernels():
    """Every mm/addmm/bmm of the GEMM problems runs as a generated GEMM kernel
    (their operands are plain or transposed matrices). gemm_divide_sum_scaling
    is not among them: matmul_sum_to_gemv turns its GEMM into an f64 GEMV
    (a reduction kernel: gemv_as_reduction)."""
    names = [
        "gemm_sigmoid_scaling_residual_add",
        "bmm_transposed_bias",
        "attention_manual",
        "mlp_residual",
        "linear_relu_half",
    ]
    for path in [p for p in PROBLEMS if p.stem in names]:
        plan = _plan(_capture(path).text, gemm="all")
        matmuls = [s for s in plan.run if s.kind == "call" and s.op in ("mm", "addmm", "bmm")]
        gemms = [k for k in plan.kernels if k.kind == "gemm"]
        assert not matmuls and gemms, (path.stem, [plan.step_text(s) for s in matmuls])
        if path.stem in ("gemm_sigmoid_scaling_residual_add", "linear_relu_half"):
            # The whole epilogue runs in the GEMM: one kernel writes the result once.
            assert len(plan.kernels) == 1 and len(gemms[0].nodes) > 1, str(plan)
        for k in gemms:
            assert k.cutlass and k.shared_bytes > 0 and k.grid[0] > 0
            assert ("OpMultiplyAddFastF32" in k.source) == ("3xtf32" in k.name)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("m,n,k", [(3, 5, 1), (33, 17, 7), (130, 66, 36)])
def test_odd_shape_gemm_kernels_compile(dtype, m, n, k):
    """Sizes that are not multiples of the tile nor of the vector width (K=1
    included) pick narrower accesses; every layout combination compiles, the
    last with an epilogue reading a residual tensor."""
    text = f"""graph @g(%a: {dtype}[{m},{k}], %w: {dtype}[{n},{k}] param, %bias: {dtype}[{n}] param, %b: {dtype}[2,{k},{n}], %r: {dtype}[2,{n},{n}]) {{
  %0 = permute(%w) {{dims=[1, 0]}} : {dtype}[{k},{n}]{{1,{k}}}
  %1 = addmm(%bias, %a, %0) : {dtype}[{m},{n}]
  %2 = permute(%a) {{dims=[1, 0]}} : {dtype}[{k},{m}]{{1,{k}}}
  %3 = mm(%2, %1) : {dtype}[{k},{n}]
  %4 = expand(%3) : {dtype}[2,{k},{n}]{{0,{n},1}}
  %5 = permute(%4) {{dims=[0, 2, 1]}} : {dtype}[2,{n},{k}]{{0,1,{n}}}
  %6 = bmm(%5, %b) : {dtype}[2,{n},{n}]
  %7 = sigmoid(%6) : {dtype}[2,{n},{n}]
  %8 = add(%7, %r) : {dtype}[2,{n},{n}]
  return %8
}}"""
    plan = _plan(text, gemm="all")
    gemms = [g for g in plan.kernels if g.kind == "gemm"]
    # 16-bit operands need 4-byte accesses: odd extents stay ATen calls.
    assert len(gemms) == (3 if dtype == "f32" or (m % 2 == 0 and n % 2 == 0 and k % 2 == 0) else 0), str(plan)
    assert not gemms or any(len(g.nodes) == 3 and "source" in g.source for g in gemms)  # bmm + epilogue
    for g, loaded in zip(gemms, core.load_kernels(gemms, 90)):
        assert not isinstance(loaded, str), (g.name, loaded)


@pytest.mark.parametrize("math", ["f32", "tf32", "bf16"])
@pytest.mark.parametrize("m,n", [(4096, 4096), (1024, 1024), (256, 256)])  # tiles 128x128, 128x64, 64x64
def test_gemm_tiles_do_not_spill_registers(monkeypatch, math, m, n):
    """Each candidate tile (picked by the cost model for these shapes) fits the
    register file: ptxas reports no spills for sm_90 (f32: 3xTF32; tf32: f32
    operands under the tf32 precision). K = 384 leaves no two slices of 256
    for split_gemm_k: the 256 x 256 linear stays one addmm kernel."""
    monkeypatch.setenv("FUSEFORGE_DISABLE_CACHE", "1")  # a disk-cache hit carries no ptxas log
    dtype = "f32" if math == "tf32" else math
    text = f"""graph @g(%a: {dtype}[{m},384], %w: {dtype}[{n},384] param, %bias: {dtype}[{n}] param) {{
  %0 = permute(%w) {{dims=[1, 0]}} : {dtype}[384,{n}]{{1,384}}
  %1 = addmm(%bias, %a, %0) : {dtype}[{m},{n}]
  %2 = gelu(%1) : {dtype}[{m},{n}]
  return %2
}}"""
    (k,) = _plan(text, gemm="all", precision="fp32" if math != "tf32" else "tf32").kernels
    assert ("_tf32_" in k.name) == (math == "tf32")
    is_cubin, size, log = core.nvrtc_compile(k.translation_unit, k.name, 90, cutlass=True, options=["-Xptxas=-v"])
    assert is_cubin and " 0 bytes spill stores" in log, (k.name, log)


@pytest.mark.parametrize(
    "reduce",
    ["amax(%1) {dims=[0], keepdim=false} : f32[320]", "sum(%2) {dims=[1], keepdim=false} : f32[256]"],
    ids=["columns", "rows"],
)
def test_cutlass_gemm_kernels_with_a_block_reduction_build_for_every_tile(monkeypatch, reduce):
    """The CUTLASS kernels (other GPUs, and short sums on Hopper) that write
    block partials build with each candidate tile, without register spills;
    the shared memory they declare holds their storage (static_asserts).
    K = 384: too short for split_gemm_k."""
    monkeypatch.setenv("FUSEFORGE_DISABLE_CACHE", "1")
    monkeypatch.setenv("FUSEFORGE_AUTOTUNE", "1")  # every tile: the plan lists the others as variants
    text = f"""graph @g(%x: f32[256,384], %w: f32[320,384], %r: f32[256,320]) {{
  %0 = permute(%w) {{dims=[1, 0]}} : f32[384,320]{{1,384}}
  %1 = mm(%x, %0) : f32[256,320]
  %2 = add(%1, %r) : f32[256,320]
  %3 = {reduce}
  return %3
}}"""
    (k,) = [k for k in _plan(text, gemm="all", arch=80).kernels if k.kind == "gemm"]
    assert "TileVisitor visitor" in k.source and len(k.variants) == 2
    for name, tu in [(k.name, k.translation_unit)] + [(v.name, v.translation_unit) for v in k.variants]:
        is_cubin, size, log = core.nvrtc_compile(tu, name, 90, cutlass=True, options=["-Xptxas=-v"])
        assert is_cubin and " 0 bytes spill stores" in log, (name, log)


@pytest.mark.parametrize(
    "k,reduce",
    [
        (1024, None),
        (8192, None),
        (1024, "sum(%3) {dims=[1], keepdim=false} : f32[1536]"),
        (1024, "amax(%3) {dims=[0], keepdim=false} : f32[512]"),
    ],
    ids=["k1024", "k8192", "row_sums", "column_maxima"],
)
def test_hopper_gemm_kernel_neither_spills_nor_serializes_its_wgmmas(monkeypatch, k, reduce):
    """ptxas's report for the wgmma kernel: no register spills (the consumer
    warpgroups' registers come from the producer's through setmaxnreg) and no
    "Potential Performance Loss": no wgmmas serialized (info C7514/C7515/C7519)
    and no setmaxnreg ignored (C7508). C7519 came with a compile-time K; that
    kernel ran 1.58 ms on an H100 where the same mainloop with run-time sizes
    ran 1.43 ms (1024 x 8192 x 8192). Also with a reduction in the epilogue. 1536 x 512:
    48 tiles, which split_gemm_k keeps whole."""
    monkeypatch.setenv("FUSEFORGE_DISABLE_CACHE", "1")  # a disk-cache hit carries no ptxas log
    text = f"""graph @g(%a: f32[1536,{k}], %w: f32[512,{k}] param, %bias: f32[512] param, %r: f32[1536,512]) {{
  %0 = permute(%w) {{dims=[1, 0]}} : f32[{k},512]{{1,{k}}}
  %1 = addmm(%bias, %a, %0) : f32[1536,512]
  %2 = sigmoid(%1) : f32[1536,512]
  %3 = add(%2, %r) : f32[1536,512]
  return %3
}}"""
    if reduce:
        # swish (x * sigmoid(x)): the epilogue reads nothing but the bias.
        text = text.replace("add(%2, %r)", "mul(%2, %1)").replace("  return %3", f"  %4 = {reduce}\n  return %4")
    kernels = [kk for kk in _plan(text, gemm="all", arch=90).kernels if kk.kind == "gemm"]
    assert len(kernels) == 1 and kernels[0].sm90a, [kk.name for kk in kernels]
    assert ("ff_sm90::reduce_" in kernels[0].source) == bool(reduce)
    for kk in kernels:
        is_cubin, size, log = core.nvrtc_compile(kk.translation_unit, kk.name, 90, options=["-Xptxas=-v"], sm90a=True)
        assert is_cubin and " 0 bytes spill stores" in log and "Performance Loss" not in log, (kk.name, log)


CONV_PROBLEMS = [p for p in PROBLEMS if "conv" in p.read_text().lower()]
_CONV_CASES = [(p, math) for p in CONV_PROBLEMS for math in ("ieee", "tf32")]


def _conv_plan(text, convs, **kw):
    """The plan for sm_90 with conv_probe's answers `convs` (FUSEFORGE_CONV_KERNELS from the test)."""
    return core.compile(text, compile_options(arch=90, convs=convs, **kw)).plan


@pytest.mark.parametrize(("path", "math"), _CONV_CASES, ids=lambda v: problem_name(v) if hasattr(v, "stem") else v)
def test_conv_kernels_compile_for_sm90_without_spills(monkeypatch, path, math):
    """Every conv kernel a problem can get (conv kernels for every conv one
    covers, all convs channels-last, in IEEE f32 or TF32) builds for sm_90
    without register spills: the convs conftest.kernel_convs names (forward
    2-D and 3-D without groups, transposed 2-D in TF32) become kernels, with
    the pointwise group after them fused; the others stay cuDNN calls or
    direct kernels. In TF32 a Hopper kernel whose input and weight were rounded
    where they were written (round_conv_operands: the channels-last copy, the
    prepared weight) reads both from shared memory; the others round their
    tiles themselves."""
    monkeypatch.setenv("FUSEFORGE_DISABLE_CACHE", "1")  # a disk-cache hit carries no ptxas log
    monkeypatch.setenv("FUSEFORGE_CONV_KERNELS", "always")
    text = _capture(path).text
    convs = core.convolutions(text)
    plan = _conv_plan(
        text,
        {
            "conv_channels_last": {c["signature"]: True for c in convs},
            "conv_tf32": {c["signature"]: math == "tf32" for c in convs},
        },
    )
    # Direct kernels (IEEE convs the implicit GEMM does not cover, where conv_engine puts them ahead of cuDNN) aside.
    kernels = [k for k in plan.kernels if k.kind == "conv" and "_direct_" not in k.name]
    covered = kernel_convs(convs, tf32=math == "tf32")
    assert len(kernels) == len(covered), (path.stem, [k.name for k in kernels])
    rounded = {b for k in plan.kernels if k.nodes[-1].op == "round_tf32" for b in k.outputs}
    for k in kernels:
        reads_rounded = k.sm90a and {k.inputs[0].buffer, k.inputs[1].buffer} <= rounded
        assert ("ff_sm90::ss::gemm(" in k.source) == reads_rounded, (path.stem, k.name)
        assert not rounded or math == "tf32", path.stem
    if math == "tf32" and path.stem == "conv2d_min_add_multiply":
        assert [k.name for k in kernels if "ff_sm90::ss::gemm(" in k.source], "the seed's conv reads its copy"
    for k in kernels:
        assert k.shared_bytes > 0 and len(k.inputs) >= 2 and k.nodes[0].op == "convolution"
        assert k.sm90a != k.cutlass, k.name  # Hopper's wgmma kernel or CUTLASS's
        is_cubin, size, log = core.nvrtc_compile(
            k.translation_unit, k.name, 90, cutlass=k.cutlass, sm90a=k.sm90a, options=["-Xptxas=-v"]
        )
        assert is_cubin and " 0 bytes spill stores" in log and "Performance Loss" not in log, (k.name, log)


def _conv_graph(channels, dtype="f32", math="ieee"):
    """A 3x3 conv of `channels` input channels, channels-last, with a sigmoid
    writing NCHW; its engine the implicit GEMM (as conv_engine records it)."""
    c = channels
    return f"""graph @g(%x: {dtype}[8,{c},40,40]{{{1600 * c},1,{40 * c},{c}}}, %w: {dtype}[96,{c},3,3]{{{9 * c},1,{3 * c},{c}}} param) {{
  %0 = convolution(%x, %w) {{dilation=[1, 1], engine="implicit_gemm", fp32_precision="{math}", groups=1, output_padding=[0, 0], padding=[1, 1], stride=[1, 1], transposed=false}} : {dtype}[8,96,40,40]{{153600,1,3840,96}}
  %1 = sigmoid(%0) : {dtype}[8,96,40,40]
  return %1
}}"""


@pytest.mark.parametrize(
    "channels,dtype,math,arch,hopper",
    [
        (32, "f32", "ieee", 90, True),
        (32, "f32", "tf32", 90, True),
        (12, "f32", "ieee", 90, True),
        (6, "f32", "ieee", 90, False),
        (32, "bf16", "ieee", 90, False),
        (32, "f32", "ieee", 80, False),
    ],
)
def test_hopper_conv_kernel_choice(monkeypatch, channels, dtype, math, arch, hopper):
    """On sm_90, f32 convs whose input channels come in 16-byte chunks (a
    multiple of 4) get the wgmma kernel, 3xTF32 or 1xTF32 by the conv's
    fp32_precision; 16-bit convs, other channel counts and other GPUs keep
    CUTLASS's. The wgmma kernel neither spills nor serializes its wgmmas."""
    monkeypatch.setenv("FUSEFORGE_DISABLE_CACHE", "1")
    monkeypatch.setenv("FUSEFORGE_CONV_KERNELS", "always")
    # The conv kernel, and its library form's sigmoid kernel.
    k, epilogue = core.compile(
        _conv_graph(channels, dtype, math), compile_options(arch=arch, convs={}, passes=["cse"])
    ).plan.kernels
    assert k.kind == "conv" and k.sm90a == hopper and k.cutlass != hopper, k.name
    assert k.library_steps[1].kernel == 1 and [n.op for n in epilogue.nodes] == ["sigmoid"]
    if hopper:
        assert ("_tf32_sm90" in k.name) == (math == "tf32") and ("_3xtf32_sm90" in k.name) == (math == "ieee")
        assert "ff_sm90::gemm_tf32<" + ("false" if math == "tf32" else "true") + ">(ConvA{x}" in k.source
        is_cubin, size, log = core.nvrtc_compile(k.translation_unit, k.name, 90, sm90a=True, options=["-Xptxas=-v"])
        assert is_cubin and " 0 bytes spill stores" in log and "Performance Loss" not in log, (k.name, log)


def test_conv_kernel_tiles_all_build(monkeypatch):
    """The autotuning candidates of an f32 conv kernel build too: beside
    Hopper's wgmma kernel, CUTLASS's kernel at each of its tiles."""
    monkeypatch.setenv("FUSEFORGE_DISABLE_CACHE", "1")
    monkeypatch.setenv("FUSEFORGE_AUTOTUNE", "1")
    monkeypatch.setenv("FUSEFORGE_CONV_KERNELS", "always")
    k, epilogue = _conv_plan(_conv_graph(32), {}, passes=["cse"]).kernels  # the conv kernel, its library form's sigmoid
    assert k.kind == "conv" and k.sm90a and len(k.variants) == 3 and len(epilogue.variants) == 0
    for name, unit, cutlass in [(k.name, k.translation_unit, False)] + [
        (v.name, v.translation_unit, True) for v in k.variants
    ]:
        is_cubin, size, log = core.nvrtc_compile(
            unit, name, 90, cutlass=cutlass, sm90a=not cutlass, options=["-Xptxas=-v"]
        )
        assert is_cubin and " 0 bytes spill stores" in log, (name, log)
