"""The scripts in tools/ run on the GPU machine only, where a name they import
from fuseforge that has since been renamed fails after minutes of setup: every
`from fuseforge... import name` in them names something that exists."""

import ast
import importlib
from pathlib import Path

import pytest

TOOLS = sorted((Path(__file__).resolve().parents[2] / "tools").glob("*.py"))


@pytest.mark.parametrize("tool", TOOLS, ids=[t.stem for t in TOOLS])
def test_every_name_a_tool_imports_from_fuseforge_exists(tool):
    missing = []
    for node in ast.walk(ast.parse(tool.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "fuseforge":
            module = importlib.import_module(node.module)
            missing += [f"{node.module}.{a.name}" for a in node.names if not hasattr(module, a.name)]
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "fuseforge":
                    importlib.import_module(a.name)
    assert not missing, f"{tool.name} imports names fuseforge no longer has: {missing}"


def test_the_conv_probe_times_an_implicit_gemm_kernel():
    """conv_probe's sections C and D time the implicit GEMM on a graph that
    names its engine: a graph the passes never decide for stays cuDNN's, and
    the sections would time nothing."""
    import sys

    sys.path.insert(0, str(TOOLS[0].parent))
    try:
        conv_probe = importlib.import_module("conv_probe")
    finally:
        sys.path.pop(0)
    from fuseforge.runtime import options

    conv = {
        "input": ("f32", [8, 64, 32, 32], [65536, 1024, 32, 1]),
        "weight": ("f32", [64, 64, 3, 3], [576, 9, 3, 1]),
        "stride": [1, 1],
        "padding": [1, 1],
        "dilation": [1, 1],
        "transposed": False,
        "output_padding": [0, 0],
        "groups": 1,
        "dtype": "f32",
    }
    for math in ("ieee", "tf32"):
        graph, shape = conv_probe._conv_graph(conv, math)
        plan = options.compile_ir(graph, arch=90, passes=["cse"], gemm="off").plan
        assert shape == [8, 64, 32, 32]
        assert [k.kind for k in plan.kernels].count("conv") == 1, [k.name for k in plan.kernels]
