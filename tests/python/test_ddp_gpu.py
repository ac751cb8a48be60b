"""Data-parallel training through the fuseforge backend on two ranks
(tools/ddp_check.py): `torch.compile(DDP(model), backend="fuseforge")`
gives, step after step, the gradients of one GPU's step over the whole
batch, by the one accuracy rule, with every graph compiled. Over NCCL each
rank has a GPU of its own; over gloo the ranks may share one."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]

PROBLEM = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 128)
        self.norm = nn.LayerNorm(128)
        self.out = nn.Linear(128, 32)

    def forward(self, x):
        return self.out(torch.nn.functional.gelu(self.norm(self.fc(x)))) * 0.5


def get_inputs():
    return [torch.randn(256, 64)]


def get_init_inputs():
    return []
"""

BATCHNORM = PROBLEM.replace("nn.LayerNorm(128)", "nn.BatchNorm1d(128)")


def _ddp_check(*args: str) -> subprocess.CompletedProcess:
    # A subprocess: torch.multiprocessing's spawned workers import the tool as a script.
    tool = ROOT / "tools" / "ddp_check.py"
    return subprocess.run([sys.executable, str(tool), *args], capture_output=True, text=True, timeout=600)


@pytest.fixture
def two_gpus():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["nccl", "gloo"])
def test_ddp_gradients_match_one_gpu(backend, tmp_path):
    if backend == "nccl" and torch.cuda.device_count() < 2:
        pytest.skip("NCCL needs a GPU per rank")
    problem = tmp_path / "mlp.py"
    problem.write_text(PROBLEM)
    result = tmp_path / "ddp.json"
    run = _ddp_check(str(problem), "--steps", "3", "--json", str(result), "--dist-backend", backend)
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(result.read_text())
    assert [s["grads_correct"] and s["ranks_equal"] for s in report["steps"]] == [True] * 3
    assert "forward" in report["graphs"] and "backward" in report["graphs"]
    assert report["eager_fallbacks"] == []


@pytest.mark.gpu
def test_ddp_refuses_batch_statistics(two_gpus, tmp_path):
    problem = tmp_path / "bn.py"
    problem.write_text(BATCHNORM)
    run = _ddp_check(str(problem), "--steps", "1", "--json", str(tmp_path / "bn.json"))
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1].endswith("train-mode BatchNorm1d: each rank normalizes its own shard")


def test_ddp_needs_the_gpus_it_names(tmp_path):
    run = _ddp_check(str(tmp_path / "any.py"), "--gpus", "1024")
    assert run.returncode == 2
    assert run.stderr.strip() == f"ddp_check: 1024 GPUs asked for, {torch.cuda.device_count()} visible"
