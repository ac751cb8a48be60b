"""GPU tests of `fuseforge emit`: each seed problem's emitted file, loaded in
a fresh process that never imports fuseforge, matches eager (outputs and
buffers, several seeds, the model's own mode) — tools/check_emitted.py does
the check. Skipped without a GPU."""

import json
import subprocess
import sys

import pytest

from conftest import PROBLEMS, ROOT
from fuseforge.harness.emit import emit_problem
from fuseforge.harness.problem import problem_name

pytestmark = pytest.mark.gpu

SEEDS = [p for p in PROBLEMS if p.parent.name == "seeds"]


@pytest.mark.parametrize("path", SEEDS, ids=problem_name)
def test_emitted_seed_matches_eager_in_a_fresh_process(path, tmp_path):
    out = tmp_path / f"{problem_name(path)}.py"
    out.write_text(emit_problem(path))
    r = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "check_emitted.py"), str(out), "--seeds", "2"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.stdout.strip(), r.stderr[-3000:]
    row = json.loads(r.stdout.strip().splitlines()[-1])
    assert row["correct"] and not row["imported_fuseforge"] and not row["fallbacks"], row
    assert r.returncode == 0


def test_emitted_module_follows_new_weights(tmp_path):
    """Weight-derived values are computed at call time: new weights, new outputs."""
    path = next(p for p in SEEDS if p.stem == "gemm_scale_batchnorm")
    out = tmp_path / "m.py"
    out.write_text(emit_problem(path))
    script = f"""
import runpy, torch
ns = runpy.run_path({str(out)!r})
model = ns["Model"](*ns["get_init_inputs"]()).cuda().eval()
new = ns["ModelNew"](*ns["get_init_inputs"]()).cuda().eval()
x = ns["get_inputs"]()[0].cuda()
for _ in range(2):
    model.bn.running_var.uniform_(0.5, 2.0)
    model.bn.running_mean.normal_()
    new.load_state_dict(model.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(new(x), model(x), rtol=1e-4, atol=1e-4)
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]
