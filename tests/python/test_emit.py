"""`fuseforge emit` without a GPU: every problem's file is valid Python whose
CUDA part compiles with nvcc for sm_90; library steps written as text compute
what the executor's calls compute; ModelNew keeps Model's state_dict keys and
runs in a process that never imports fuseforge."""

import importlib.util
import inspect
import json
import math
import os
import re
import shutil
import subprocess
import sys
import types

import pytest
import torch

from conftest import PROBLEMS, ROOT, TINY_PROBLEM
from fuseforge.dtypes import TORCH
from fuseforge.emit import emit_model
from fuseforge.emit.ops import EmitError, literal, step_expr
from fuseforge.harness.emit import emit_problem
from fuseforge.harness.problem import load_problem, problem_name
from fuseforge.runtime import library_calls
from fuseforge.runtime.cutlass_headers import cutlass_include_dir

NVCC = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
SEEDS = [p for p in PROBLEMS if p.parent.name == "seeds"]


@pytest.fixture(scope="module")
def emitted(tmp_path_factory):
    out = tmp_path_factory.mktemp("emitted")
    files = {}
    for path in PROBLEMS:
        files[problem_name(path)] = out / f"{problem_name(path)}.py"
        files[problem_name(path)].write_text(emit_problem(path))
    return files


def _source(text, var):
    return re.search(rf"{var} = r'''(.*?)'''", text, re.S).group(1)


def _split_includes(source):
    """(#include lines, the rest) of an emitted file's CUDA source."""
    lines = source.splitlines()
    return [ln for ln in lines if ln.startswith("#include")], "\n".join(
        ln for ln in lines if not ln.startswith("#include")
    )


def test_emitted_kernels_have_cxx_linkage(emitted):
    """Every kernel of every kind is declared FF_EXTERN_C, which emitted files
    define empty: an extern "C" kernel in two files' namespaces would clash
    wherever two emitted models are linked together. (A kernel whose code an
    earlier one has is not written again: its launcher launches the first.)"""
    for name, path in emitted.items():
        cu = _source(path.read_text(), "_FF_CUDA_SOURCE")
        assert 'extern "C" __global__' not in cu, name
        launchers, reused = (
            cu.count("cudaError_t launch("),
            cu.count("cudaLaunchKernel(reinterpret_cast<const void*>(&k_"),
        )
        assert cu.count("FF_EXTERN_C __global__") == launchers - reused, name


@pytest.mark.skipif(not os.path.exists(NVCC), reason="needs nvcc")
def test_every_problem_emits_python_and_cuda_that_compiles(emitted, tmp_path):
    # One translation unit for all problems (one nvcc run): each in its own
    # namespace, the files' #include lines (CUTLASS's for GEMM kernels) first.
    includes, parts = {}, []
    for name, path in emitted.items():
        text = path.read_text()
        compile(text, str(path), "exec")
        file_includes, body = _split_includes(_source(text, "_FF_CUDA_SOURCE"))
        includes.update(dict.fromkeys(file_includes))
        parts.append(f"namespace p_{name} {{\n{body}\n}}")
    assert any("cutlass" in inc for inc in includes), "no problem emitted a CUTLASS GEMM kernel"
    assert "wgmma.mma_async" in "".join(parts), "no problem emitted a Hopper GEMM kernel"
    parts.insert(0, "\n".join(includes))
    src = tmp_path / "all.cu"
    src.write_text("\n".join(parts))
    # The flags load_inline gives nvcc, and the CUTLASS include the emitted files add;
    # the target the files ask for on Hopper (TORCH_CUDA_ARCH_LIST=9.0a: wgmma).
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS

    flags = [*COMMON_NVCC_FLAGS, "-std=c++17", f"-I{cutlass_include_dir()}"]
    r = subprocess.run(
        [NVCC, "-gencode=arch=compute_90a,code=sm_90a", *flags, "-cubin", "-o", str(tmp_path / "all.cubin"), str(src)],
        capture_output=True,
        text=True,
    )
    errors = [ln for ln in r.stderr.splitlines() if " error" in ln or "error:" in ln]
    assert r.returncode == 0, "\n".join(errors[:20]) or r.stderr[-3000:]


@pytest.mark.skipif(not shutil.which("g++"), reason="needs g++")
def test_seed_host_wrappers_compile_against_torch_headers(emitted, tmp_path):
    from torch.utils.cpp_extension import include_paths

    includes = [
        "#include <torch/extension.h>",
        "#include <ATen/cuda/CUDAContext.h>",
        "#include <c10/cuda/CUDAGuard.h>",
        "#include <cuda_runtime.h>",
        "#include <vector>",
    ]
    parts = list(includes)
    for path in SEEDS:
        cpp = _source(emitted[problem_name(path)].read_text(), "_FF_CPP_SOURCE")
        for inc in includes:
            cpp = cpp.replace(inc, "")
        parts.append(f"namespace p_{problem_name(path)} {{\n{cpp}\n}}")
    src = tmp_path / "hosts.cpp"
    src.write_text("\n".join(parts))
    import sysconfig

    flags = [f"-I{p}" for p in include_paths(device_type="cuda")] + [
        "-I/usr/local/cuda/include",
        f"-I{sysconfig.get_paths()['include']}",
    ]
    r = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", *flags, str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]


def _random(b):
    dtype, shape, strides = TORCH[b.dtype], list(b.shape), list(b.strides)
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(0, 5, shape, dtype=dtype)
    size = 1 + sum((n - 1) * st for n, st in zip(shape, strides))  # strides may be 0 (expanded)
    base = (torch.rand(size, dtype=torch.float64) + 0.5).to(dtype)  # positive: var, rsqrt, log stay finite
    return base.as_strided(shape, strides)


def _cheap(plan, step):
    """Small enough to run on the CPU in CI (big GEMMs and convolutions are skipped)."""
    from fuseforge.harness.roofline import _step_flops

    ids = [o.buffer for o in step.operands if o.buffer >= 0] + list(step.results)
    return sum(math.prod(plan.buffers[b].shape) for b in ids) <= 1 << 23 and _step_flops(plan, step) <= 1 << 31


@pytest.mark.parametrize("path", PROBLEMS, ids=problem_name)
def test_library_steps_as_text_match_the_executor(path):
    from fuseforge.capture import capture
    from fuseforge.runtime.options import compile_ir

    mod = load_problem(path)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs())
    for mode in ("train", "eval"):
        model.train(mode == "train")
        plan = compile_ir(capture(model, mod.get_inputs(), name="M").text).plan
        for step in [*plan.prepare, *plan.run, *(n for k in plan.kernels for n in k.nodes)]:
            if step.kind not in ("call", "view") or "dropout" in step.attrs.get("target", "") or not _cheap(plan, step):
                continue  # random, or too slow here
            env = {o.buffer: _random(plan.buffers[o.buffer]) for o in step.operands if o.buffer >= 0}
            operands = [env[o.buffer] if o.buffer >= 0 else o.literal for o in step.operands]
            want = library_calls.make_call(step, torch.device("cpu"))(operands)
            names = {b: f"a{i}" for i, b in enumerate(env)}
            text = step_expr(step, [names[o.buffer] if o.buffer >= 0 else literal(o.literal) for o in step.operands])
            helpers = {f.__name__: f for f in library_calls.HELPERS}  # the emitted file's too
            scope = {"torch": torch, "dev": torch.device("cpu"), **helpers, **{names[b]: env[b] for b in names}}
            got = eval(text, scope)
            want = list(want) if isinstance(want, (tuple, list)) else [want]
            got = list(got) if isinstance(got, (tuple, list)) else [got]
            assert len(got) >= len(step.results), text
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True, msg=text)


def test_a_step_without_a_torch_form_fails_clearly():
    """An opaque node whose captured arguments fall outside capture's grammar
    has no Python form: a clear EmitError naming the step."""
    from fuseforge.runtime.options import compile_ir

    plan = compile_ir("""graph @g(%x: f32[4]) {
  %0 = opaque(%x) {args="[$0, os.system]", target="aten.relu.default"} : f32[4]
  return %0
}""").plan
    (step,) = [s for s in plan.run if s.kind == "call"]
    with pytest.raises(EmitError, match=r"no Python form for step `%0 = opaque\(%x\)"):
        step_expr(step, ["a0"])


@pytest.mark.parametrize("name", ["gemm_divide_sum_scaling", "gemm_scale_batchnorm", "conv2d_min_add_multiply"])
def test_emitted_file_runs_the_executors_steps(emitted, name):
    """The emitted forward and prepare functions hold one commented block per
    plan step, in the plan's order, and the in-process executor runs the very
    same steps: the two walkers of a plan cannot drift apart."""
    from fuseforge._native import target_arch
    from fuseforge.capture import capture
    from fuseforge.runtime.executor import Executor
    from fuseforge.runtime.options import compile_ir

    path = next(p for p in PROBLEMS if p.stem == name)
    mod = load_problem(path)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs())
    text = emitted[name].read_text()
    for mode in ("train", "eval"):
        model.train(mode == "train")
        plan = compile_ir(capture(model, mod.get_inputs(), name="M").text, arch=target_arch()).plan  # as emit's
        executor = Executor(plan, torch.device("cpu"))
        fn = re.search(rf"'{mode}': _FF_PLAN_(\w+)", text).group(1)  # modes with equal plans share one
        code = re.search(rf"(def _ff_prepare_{fn}\(.*?)?def _ff_run_{fn}\(.*?\n\n\n", text, re.S).group(0)
        emitted_steps = [line.strip()[2:] for line in code.splitlines() if line.strip().startswith("# ")]
        assert emitted_steps == executor.step_texts == [plan.step_text(s) for s in [*plan.prepare, *plan.run]]
        assert emitted_steps, name


def test_imports_beyond_torch_are_refused(tmp_path):
    bad = tmp_path / "uses_numpy.py"
    bad.write_text(SEEDS[0].read_text().replace("import torch\n", "import torch\nimport numpy\n", 1))
    with pytest.raises(EmitError, match="may import only torch"):
        emit_problem(bad)


def test_emit_model_takes_a_model_its_inputs_and_source():
    """The product's entry point needs no problem file: a model of the Model
    its source defines, example inputs and that source."""
    source = TINY_PROBLEM.format(prelude="", init="pass")
    namespace: dict = {}
    exec(compile(source, "tiny.py", "exec"), namespace)
    model = namespace["Model"](8)
    text = emit_model(model, [torch.randn(4, 8)], source, name="tiny", modes=["eval"], arch=90)
    assert "# ---- tiny.py, verbatim" in text and "class ModelNew(Model):" in text
    assert "_FF_PLANS = {'eval': _FF_PLAN_eval}" in text
    with pytest.raises(EmitError, match="does not define Model"):
        emit_model(model, [torch.randn(4, 8)], source.replace("class Model(", "class Other("), name="tiny")


_UNROLLED = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, h):
        for t in range(x.shape[0]):
            h = torch.tanh(x[t] * 0.5 + h.mean(0, keepdim=True) * h)
        return h
"""


def test_kernels_with_the_same_code_are_emitted_once():
    """An unrolled loop's steps share their kernels' code: the file holds each
    distinct kernel once, and a later step's launcher launches the first."""
    from fuseforge.capture import capture
    from fuseforge.runtime.options import compile_ir

    namespace: dict = {}
    exec(compile(_UNROLLED, "unrolled.py", "exec"), namespace)
    model, inputs = namespace["Model"](), [torch.randn(6, 256, 512), torch.randn(256, 512)]
    kernels = compile_ir(capture(model, inputs, name="unrolled").text, arch=90).plan.kernels
    keys = [k.compile_key for k in kernels]
    assert len(set(keys)) < len(keys)
    cu = _source(emit_model(model, inputs, _UNROLLED, name="unrolled", modes=["eval"], arch=90), "_FF_CUDA_SOURCE")
    assert cu.count("FF_EXTERN_C __global__") == len(set(keys))
    names = [k.name for k in kernels]
    for i, key in enumerate(keys):
        first = names[keys.index(key)]
        assert (f" {names[i]}(" in cu) == (first == names[i]), names[i]  # defined, or not
        if first != names[i]:
            assert f"_cuda::{first})" in cu, (names[i], first)


def test_model_new_keeps_state_dict_and_runs_without_fuseforge(emitted, tmp_path):
    path = emitted["gemm_scale_batchnorm"]
    script = f"""
import json, sys, warnings, runpy, torch
ns = runpy.run_path({str(path)!r})
model = ns["Model"](*ns["get_init_inputs"]())
new = ns["ModelNew"](*ns["get_init_inputs"]())
new.load_state_dict(model.state_dict())
x = torch.randn(8, 4096)  # a CPU input of another shape: Model.forward, with a warning
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    with torch.no_grad():
        same = torch.equal(new(x), model(x))
print(json.dumps({{"keys": list(new.state_dict()) == list(model.state_dict()), "same": same,
                  "warned": any("ModelNew" in str(m.message) for m in w), "graphs": ns["_ff_graph_choices"](new),
                  "fuseforge": any(m.startswith("fuseforge") for m in sys.modules)}}))
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # fuseforge not importable there
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {
        "keys": True,
        "same": True,
        "warned": True,
        "graphs": {},
        "fuseforge": False,
    }


def test_hopper_gemm_kernels_are_emitted_for_sm90a(emitted):
    text = emitted["gemm_sigmoid_scaling_residual_add"].read_text()
    assert "wgmma.mma_async" in text and "_FF_NEEDS_SM90A = True" in text
    assert "_FF_NEEDS_CUTLASS = False" in text and "#include <cutlass" not in text
    assert 'os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0a"' in text
    assert "_FF_NEEDS_SM90A = False" in emitted["matrix_scalar_multiplication"].read_text()


def test_hopper_kernels_build_for_sm90a_and_leave_the_arch_list_as_it_was(emitted, monkeypatch):
    import importlib.util

    import torch.utils.cpp_extension as ext

    seen = []
    monkeypatch.setattr(ext, "load_inline", lambda **kw: seen.append(os.environ.get("TORCH_CUDA_ARCH_LIST")) or "ext")
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0")
    spec = importlib.util.spec_from_file_location("emitted_sm90a", emitted["gemm_sigmoid_scaling_residual_add"])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod._ff_extension() == "ext" and seen == ["9.0a"]
    assert os.environ["TORCH_CUDA_ARCH_LIST"] == "8.0"


def test_gemm_kernels_are_emitted_and_need_cutlass(emitted, tmp_path):
    import importlib.util
    import warnings

    assert "_FF_NEEDS_CUTLASS = False" in emitted["matrix_scalar_multiplication"].read_text()
    seed = next(p for p in SEEDS if problem_name(p) == "gemm_sigmoid_scaling_residual_add")
    path = tmp_path / "gemm_sigmoid_sm80.py"  # for an Ampere GPU: CUTLASS's sm80 kernels
    path.write_text(emit_problem(seed, arch=80))
    text = path.read_text()
    assert "#include <cutlass/gemm/kernel/gemm_batched.h>" in text and "_FF_NEEDS_CUTLASS = True" in text
    assert "cudaFuncAttributeMaxDynamicSharedMemorySize" in text  # its tile needs > 48 KiB
    spec = importlib.util.spec_from_file_location("emitted_gemm_sigmoid", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod._FF_CUTLASS_INCLUDE == cutlass_include_dir() is not None
    mod._FF_CUTLASS_INCLUDE = None  # as on a machine without the nvidia-cutlass wheel
    model = mod.ModelNew(64, 32, 2.0)
    x = torch.randn(8, 64)
    with warnings.catch_warnings(record=True) as w, torch.no_grad():
        warnings.simplefilter("always")
        out = model(x)
    assert any("CUTLASS" in str(m.message) for m in w)
    torch.testing.assert_close(out, mod.Model.forward(model, x), rtol=0, atol=0)


def test_cli_emit_writes_the_file(tmp_path):
    from fuseforge.harness import cli

    out = tmp_path / "model_new.py"
    assert cli.main(["emit", str(SEEDS[-1]), "-o", str(out)]) == 0
    assert "class ModelNew(Model)" in out.read_text()
    assert cli.main(["emit", str(SEEDS[-1]), "-o", str(out), "--modes", "test"]) == 2
    seed = next(p for p in SEEDS if problem_name(p) == "gemm_sigmoid_scaling_residual_add")
    assert cli.main(["emit", str(seed), "-o", str(out), "--arch", "80"]) == 0
    assert "_FF_NEEDS_SM90A = False" in out.read_text() and "_FF_NEEDS_CUTLASS = True" in out.read_text()


def test_check_emitted_tool_runs_its_check_and_timing_paths(tmp_path, capsys, monkeypatch):
    """tools/check_emitted.py (which never imports fuseforge) on the CPU: it
    loads an emitted file, checks ModelNew against Model and fp64, reports
    the CPU fallback ModelNew warns about as a failure, and hands the timer
    what runtime/timing.time_cuda takes (a mapping of named calls)."""
    problem = tmp_path / "tiny.py"
    problem.write_text(TINY_PROBLEM.format(prelude="", init="pass"))
    emitted = tmp_path / "tiny_new.py"
    emitted.write_text(emit_problem(problem))
    spec = importlib.util.spec_from_file_location("check_emitted", ROOT / "tools" / "check_emitted.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    out = tmp_path / "row.json"
    assert tool.main([str(emitted), "--device", "cpu", "--seeds", "2", "--json", str(out)]) == 1
    row = json.loads(out.read_text())
    assert row["correct"] and row["max_err_vs_fp64"] < 1e-4 and row["mode"] == "train", row
    assert row["fallbacks"] and "running Model.forward" in row["fallbacks"][0], row
    assert row["graphs"] == {}, row  # CPU inputs never reach a graph
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == row

    from fuseforge.runtime.timing import time_cuda

    called = []

    def timer(*args, **kwargs):  # the real one's signature, without a GPU
        bound = inspect.signature(time_cuda).bind(*args, **kwargs)
        for name, fn in bound.arguments["fns"].items():
            fn()
            called.append(name)
        return {name: 2.0 for name in called}

    monkeypatch.setattr(tool, "_timing_module", lambda: types.SimpleNamespace(time_cuda=timer))
    model = load_problem(problem).Model(8)
    assert tool._time(model, model, [torch.randn(4, 8)]) == {"emitted_ms": 2.0, "eager_ms": 2.0}
    assert called == ["emitted", "eager"]


@pytest.mark.skipif(not os.path.exists(NVCC), reason="needs nvcc")
def test_conv_kernels_and_conv_precision_are_emitted(monkeypatch, tmp_path):
    """With conv kernels on, the seed's conv and its epilogue are one kernel in
    the emitted file (Hopper: the wgmma kernel; other GPUs: CUTLASS's), whose
    CUDA builds with nvcc; library convs carry their decided precision (IEEE
    without a GPU) through the helper the file defines."""
    seed = next(p for p in SEEDS if problem_name(p) == "conv2d_min_add_multiply")
    monkeypatch.setenv("FUSEFORGE_CONV_KERNELS", "always")
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS

    for arch, marker, target in [
        (90, "ff_sm90::gemm_tf32<true>(ConvA{x}", "arch=compute_90a,code=sm_90a"),
        (80, "cutlass/conv/kernel/default_conv2d_fprop.h", "arch=compute_80,code=sm_80"),
    ]:
        text = emit_problem(seed, arch=arch)
        cuda = _source(text, "_FF_CUDA_SOURCE")
        assert marker in cuda and "ff_conv2d_" in cuda, cuda[:2000]
        assert ("_FF_NEEDS_SM90A = True" in text) == (arch == 90)
        forwards = text[text.index("def _ff_run_") :]
        assert "_ff_convolution(" not in forwards and "ff_conv2d_" in text, forwards[:3000]
        src = tmp_path / f"conv{arch}.cu"
        src.write_text(cuda)
        r = subprocess.run(
            [
                NVCC,
                f"-gencode={target}",
                *COMMON_NVCC_FLAGS,
                "-std=c++17",
                f"-I{cutlass_include_dir()}",
                "-cubin",
                "-o",
                str(tmp_path / f"conv{arch}.cubin"),
                str(src),
            ],
            capture_output=True,
            text=True,
        )
        assert r.returncode == 0, r.stderr[-3000:]
    monkeypatch.setenv("FUSEFORGE_CONV_KERNELS", "off")
    library = emit_problem(seed, arch=90)
    assert "def _ff_conv_fp32(value: str)" in library and "_ff_convolution('ieee', " in library
    compile(library, "library.py", "exec")


def test_emitted_files_carry_the_graph_runtime_and_its_switch(emitted):
    from fuseforge.emit import dispatch

    for name, path in emitted.items():
        text = path.read_text()
        header = text.split('"""')[1]
        assert "CUDA_GRAPHS" in header and "FUSEFORGE_CUDA_GRAPHS=auto" in header, name
        assert "\nCUDA_GRAPHS = True\n" in text.split("# ---- generated by fuseforge")[0], name
        for obj in dispatch.EMITTED:  # what test_emit_dispatch.py runs is the file's runtime, verbatim
            assert inspect.getsource(obj) in text, (name, obj.__name__)
        assert re.search(r'torch\.cuda\.graph\(graph, .*capture_error_mode="thread_local"\)', text), name


def test_segments_return_what_later_steps_read():
    """A run of consecutive launches is one C++ call: it takes what its
    kernels read that it does not make and returns what it makes that a
    later step, the outputs or the buffer updates read."""
    from fuseforge.capture import capture
    from fuseforge.emit.cuda import segment_host, segments
    from fuseforge.runtime.options import compile_ir

    path = next(p for p in PROBLEMS if p.stem == "gemm_scale_batchnorm")
    mod = load_problem(path)
    model = mod.Model(*mod.get_init_inputs())
    for mode in ("train", "eval"):
        model.train(mode == "train")
        plan = compile_ir(capture(model, mod.get_inputs(), name="M").text, arch=90).plan
        segs = segments(plan, "s")
        assert segs, mode
        for seg in segs:
            made = [
                b for i in seg.steps if plan.run[i].kind == "launch" for b in plan.kernels[plan.run[i].kernel].outputs
            ]
            later: set = {*plan.outputs, *(v for _, v in plan.mutations)}
            for step in list(plan.run)[seg.steps[-1] + 1 :]:
                if step.kind == "launch":
                    k = plan.kernels[step.kernel]
                    later |= {i.memory for i in k.inputs} | set(k.scalars)
                elif step.kind != "free":
                    later |= {o.buffer for o in step.operands}
            assert {b for b in made if b in later} <= set(seg.outputs) <= set(made), (mode, seg)
            read = {
                i.memory
                for s in seg.steps
                if plan.run[s].kind == "launch"
                for i in plan.kernels[plan.run[s].kernel].inputs
            }
            assert set(seg.inputs) == read - set(made), (mode, seg)
            cpp = segment_host(seg, plan, {j: f"k{j}" for j in range(len(plan.kernels))})
            assert cpp.count("std::vector<at::Tensor> r") == sum(plan.run[i].kind == "launch" for i in seg.steps)
