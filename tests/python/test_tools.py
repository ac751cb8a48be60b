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
