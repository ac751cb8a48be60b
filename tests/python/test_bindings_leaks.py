"""The bindings leak nothing: at interpreter exit nanobind counts the core's
instances, functions and types still alive and reports any on stderr
("nanobind: leaked N instances!"). Each workload runs in a process of its own
on the CPU paths; its stderr must hold no such report. A Python object that
outlives the run (a model kept by a hook torch left registered, a cycle the
collector cannot see) keeps the plans and kernels it reaches alive, so the
report also catches leaks outside the binding code."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fuseforge
from fuseforge.capture import CaptureError, capture

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "benchmarks" / "problems" / "seeds" / "gemm_sigmoid_scaling_residual_add.py"

_MODEL = """
import warnings
import torch
import fuseforge
from fuseforge.capture import CaptureError

class LinearGelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 32)

    def forward(self, x):
        return torch.nn.functional.gelu(self.fc(x)) * 0.5

cpu = torch.device("cpu")
model = LinearGelu()
fast = fuseforge.optimize(model)
x = torch.randn(8, 64)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    fast(x)  # CPU inputs: eager
# A plan run on the CPU (kernels on the reference interpreter), kept alive here.
spec = fast._specialize([x], cpu)
torch.testing.assert_close(fast._run(spec, spec.gather([x]), [x]), model(x))
"""

WORKLOADS = {
    "cli-run": f"from fuseforge.harness.cli import main\nassert main(['run', {str(SEED)!r}]) == 0\n",
    "cli-explain": f"from fuseforge.harness.cli import main\nassert main(['explain', {str(SEED)!r}]) == 0\n",
    "optimize": _MODEL,
    # Inputs the model rejects: torch.export fails (a shape) or the graph does
    # not compile (f64 inputs into f32 weights), with a compiled plan alive.
    "capture-error": _MODEL
    + """
for bad in (torch.randn(8, 100), torch.randn(8, 64, dtype=torch.float64)):
    try:
        fast._specialize([bad], cpu)
    except CaptureError:
        pass
    else:
        raise AssertionError("captured inputs the model rejects")
""",
}


@pytest.mark.parametrize("workload", WORKLOADS)
def test_no_binding_objects_outlive_the_interpreter(workload):
    env = dict(os.environ, PYTHONPATH=str(Path(fuseforge.__file__).parents[1]))  # the fuseforge under test
    proc = subprocess.run(
        [sys.executable, "-c", WORKLOADS[workload]], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    leaks = [line for line in proc.stderr.splitlines() if "nanobind: leaked" in line or "leaked instance" in line]
    assert not leaks, "\n".join(leaks[:20])


class KeepsLast(torch.nn.Module):
    """Assigns a buffer in forward (as running statistics kept by hand do)."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 32)
        self.register_buffer("last", torch.zeros(8, 32))

    def forward(self, x):
        y = self.fc(x)
        self.last = y.detach()
        return y


def test_a_failed_capture_leaves_no_torch_hook_holding_the_model():
    """Non-strict export registers a global buffer-registration hook over the
    traced module and removes it only when tracing succeeds; capture removes
    one a failed trace left, or it would keep the model alive for the rest of
    the process and fail the eager fallback's next buffer assignment."""
    hooks = torch.nn.modules.module._global_buffer_registration_hooks
    before = dict(hooks)
    model = KeepsLast()
    with pytest.raises(CaptureError, match="torch.export failed"):
        capture(model, [torch.randn(8, 100)])
    assert dict(hooks) == before
    x = torch.randn(8, 64)
    torch.testing.assert_close(model(x), model.fc(x))  # eager, as after any capture failure
    assert torch.equal(model.last, model.fc(x).detach())
