"""The torch.compile backend: registered by name, takes the precision policy
as an option, refuses unknown options, and runs the model (eagerly on CPU
inputs, as every fuseforge module does)."""

import pytest
import torch

import fuseforge  # noqa: F401  (registers the backend)
from fuseforge.runtime.backend import fuseforge_backend
from fuseforge.runtime.module import OptimizedModule


class M(torch.nn.Module):
    def forward(self, x):
        return torch.sigmoid(x) * 2.0


def test_options_reach_the_optimized_module():
    gm = torch.fx.symbolic_trace(M())
    fast = fuseforge_backend(gm, [], options={"precision": "tf32"})
    assert isinstance(fast, OptimizedModule) and fast.precision == "tf32"
    assert fuseforge_backend(gm, []).precision == "fp32"
    with pytest.raises(ValueError, match="unknown option\\(s\\) 'tile'; it takes precision"):
        fuseforge_backend(gm, [], options={"tile": 64})
    with pytest.raises(ValueError, match="precision 'bf16' is not available"):
        fuseforge_backend(gm, [], options={"precision": "bf16"})


def test_torch_compile_passes_the_options():
    torch._dynamo.reset()
    x = torch.randn(4, 8)
    compiled = torch.compile(M(), backend="fuseforge", options={"precision": "tf32"})
    torch.testing.assert_close(compiled(x), M()(x))
