"""Compile phase times (fuseforge.phases, core.Compiled.phase_seconds) and
`fuseforge run --compile-times`'s table of them."""

import json
import textwrap

import pytest
import torch
from torch import nn

from fuseforge import phases
from fuseforge.capture import capture
from fuseforge.harness import cli
from fuseforge.runtime.options import compile_ir

CORE_STAGES = ["parse", "passes", "fusion", "codegen", "plan"]


class _Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.lin(x)).sum(dim=1)


def test_the_core_reports_its_stages_in_order():
    compiled = compile_ir(capture(_Small(), [torch.randn(4, 8)]).text)
    assert [name for name, _ in compiled.phase_seconds] == CORE_STAGES
    assert all(s >= 0 for _, s in compiled.phase_seconds)


def test_recording_collects_capture_and_core_phases_and_nothing_outside_it():
    model, x = _Small(), torch.randn(4, 8)
    with phases.recording() as outer:
        with phases.recording() as inner:
            compile_ir(capture(model, [x]).text)
    assert set(inner) == {"capture: export", "capture: decompositions", "capture: lowering", "GPU probes", *CORE_STAGES}
    assert inner == outer and set(inner) <= set(phases.ORDER)
    capture(model, [x])  # not recording: adds to neither
    assert inner == outer and all(s >= 0 for s in inner.values())


def test_cpu_run_with_compile_times_prints_each_phase(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("with a GPU, run takes the GPU path (test_gpu.py)")
    path, out = tmp_path / "small.py", tmp_path / "row.json"
    path.write_text(
        textwrap.dedent("""
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def forward(self, x):
                return torch.tanh(x) * 2

        def get_inputs():
            return [torch.randn(64, 256)]

        def get_init_inputs():
            return []
    """)
    )
    assert cli.main(["run", str(path), "--compile-times", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    seconds = json.loads(out.read_text())["compile_phases_s"]
    assert {"capture: export", "passes", "fusion", "codegen", "NVRTC"} <= set(seconds)
    for phase in seconds:
        assert phase in printed
    assert "compile phases, empty kernel cache" in printed
