"""The target GPU's facts (core.Target): where compile options take them
from, that kernel choices read them, and that csrc spells no GPU's facts as
literals outside csrc/ir/target.*."""

import re
import subprocess

import pytest
import torch

from conftest import ROOT
from fuseforge._native import core
from fuseforge.runtime.options import compile_options, compile_target, device_target

# Its threads along the reduced dim are as many as keep every SM busy.
COLUMN_SUM = """graph @g(%x: f32[512,131072]) {
  %0 = sum(%x) {dims=[0], keepdim=false} : f32[131072]
  return %0
}"""


def _launches(options):
    return [(k.name, k.grid, k.block) for k in core.compile(COLUMN_SUM, options).plan.kernels]


def test_options_without_a_device_take_the_archs_usual_part():
    assert device_target(None) is None and device_target(torch.device("cpu")) is None
    target = compile_options(arch=90).target
    assert str(target) == str(core.default_target()) == str(compile_target(90))
    assert str(target).startswith("sm90-132sm (132 SMs, ")
    assert compile_options(arch=80).target.sm_count == 108


def test_a_target_with_half_the_sms_changes_a_reduction_kernels_launch():
    half = core.Target(arch=90, sm_count=66, shared_per_block_optin=227 * 1024, shared_per_sm=228 * 1024, l2_bytes=0)
    options = compile_options(arch=90, target=half)
    assert options.target.sm_count == 66 and str(options.target).startswith("sm90-66sm ")
    assert _launches(options) != _launches(compile_options(arch=90))


def test_bad_target_facts_are_one_clear_error():
    with pytest.raises(ValueError, match="must be positive"):
        core.Target(arch=90, sm_count=0, shared_per_block_optin=1, shared_per_sm=1, l2_bytes=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.gpu
def test_a_cuda_device_gives_its_own_facts():
    target = device_target(torch.device("cuda"))
    props = torch.cuda.get_device_properties(0)
    assert target.sm_count == props.multi_processor_count
    assert target.shared_per_block_optin == props.shared_memory_per_block_optin


def test_csrc_has_no_hardware_literals_outside_the_target():
    """SM counts and shared-memory limits come from the Target; comments may
    still quote a part's figures."""
    files = subprocess.run(["git", "ls-files", "csrc"], cwd=ROOT, capture_output=True, text=True, check=True)
    literal = re.compile(r"\b132\b|\b22[78] \* 1024\b")
    found = []
    for name in files.stdout.split():
        if name.startswith("csrc/ir/target.") or not name.endswith((".cc", ".h")):
            continue
        for i, line in enumerate((ROOT / name).read_text().splitlines(), 1):
            if literal.search(line.split("//")[0]):
                found.append(f"{name}:{i}: {line.strip()}")
    assert not found, "\n".join(found)


SMALL = """
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2

def get_inputs():
    return [torch.randn(64, 256)]

def get_init_inputs():
    return []
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="without a GPU, the CLI compiles for the default target")
def test_the_cli_names_the_target_it_compiled_for(tmp_path, capsys):
    from fuseforge.harness import cli

    path = tmp_path / "small.py"
    path.write_text(SMALL)
    target = str(core.default_target())
    assert cli.main(["run", str(path)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert f"compiling kernels with NVRTC for target {target} and checking" in first, first
    assert cli.main(["explain", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"\ntarget: {target}\nplan @" in out, out
