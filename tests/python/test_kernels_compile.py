"""Every kernel generated for every problem compiles with NVRTC for sm_90 (no
GPU needed), and the optimized plan agrees with the captured graph's meaning."""
import pytest
import torch

from fuseforge._native import core
from fuseforge.capture import capture
from fuseforge.problem import load_problem, problem_name

from conftest import PROBLEMS


def _capture(path):
    mod = load_problem(path)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs())
    return capture(model, mod.get_inputs(), name=problem_name(path))


@pytest.mark.parametrize("path", PROBLEMS, ids=problem_name)
def test_every_kernel_compiles_for_sm90(path):
    plan = core.compile_graph(_capture(path).text)
    # The plan covers the graph: each output is produced by some step.
    produced = set(plan["inputs"])
    for step in plan["steps"]:
        produced |= set(plan["kernels"][step["kernel"]]["outputs"] if step["kind"] == "kernel" else step["results"])
    assert set(plan["outputs"]) <= produced
    for k in plan["kernels"]:
        is_cubin, size, log = core.nvrtc_compile(k["source"], k["name"], 90)
        assert is_cubin and size > 0, (k["name"], log)
        assert k["name"] in k["source"]
