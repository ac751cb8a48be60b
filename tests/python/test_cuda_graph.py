"""CUDA graph replay's switch and its CPU behaviour (the GPU's in
test_cuda_graph_gpu.py): FUSEFORGE_CUDA_GRAPHS is read in one place and a
bad value is named; a plan on the CPU never replays, whatever the switch."""

import pytest
import torch
from torch import nn

from fuseforge.capture import capture
from fuseforge.runtime import cuda_graph
from fuseforge.runtime.executor import Executor
from fuseforge.runtime.options import ENV_CUDA_GRAPHS, compile_ir, cuda_graphs


@pytest.mark.parametrize(
    "value, mode", [(None, "auto"), ("auto", "auto"), ("always", "always"), ("off", "off"), ("0", "off")]
)
def test_the_switch(monkeypatch, value, mode):
    if value is None:
        monkeypatch.delenv(ENV_CUDA_GRAPHS, raising=False)
    else:
        monkeypatch.setenv(ENV_CUDA_GRAPHS, value)
    assert cuda_graphs() == mode


def test_a_bad_value_is_named(monkeypatch):
    monkeypatch.setenv(ENV_CUDA_GRAPHS, "yes")
    with pytest.raises(ValueError, match="FUSEFORGE_CUDA_GRAPHS='yes': expected auto, always or off"):
        cuda_graphs()


@pytest.mark.parametrize("training", [False, True])
def test_a_cpu_plan_never_replays(monkeypatch, training):
    monkeypatch.setenv(ENV_CUDA_GRAPHS, "always")
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    x = torch.randn(4, 8)
    captured = capture(model, [x], name="m")
    executor = Executor(compile_ir(captured.text).plan, torch.device("cpu"))
    inputs = captured.graph_inputs(model, [x])
    with torch.no_grad():
        torch.testing.assert_close(executor(inputs)[0][0], model(x))
        timed = []
        varying = [kind == "arg" for kind, _ in captured.input_getters(model)]
        assert not cuda_graph.adopt(executor, inputs, varying, [], lambda: timed.append, training)
    assert executor.graph is None and timed == []  # nothing captured, nothing timed
