"""The warm-start cache of captured graphs (runtime/plan_cache.py): a new
process compiles a model it has seen without tracing it again; any change
that could change the capture misses; an unreadable entry is deleted, said
once, and captured again."""

import copy
import importlib.util
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

import fuseforge
from fuseforge.capture import capture
from fuseforge.runtime import module, options, plan_cache

CPU = torch.device("cpu")


class Block(nn.Module):
    """A parameter, a buffer written in training, a plain tensor attribute
    (capture lifts it as a constant), a Python number read in forward and a
    nested output with a non-tensor leaf."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.bn = nn.BatchNorm1d(8)
        self.shift = torch.linspace(-1, 1, 8)
        self.scale = 0.5

    def forward(self, x, s):
        y = self.bn(torch.relu(self.lin(x)) + self.shift) * self.scale
        return {"y": y * s, "rest": (y.sum(), 3)}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(options.ENV_CACHE_DIR, str(tmp_path / "cache"))
    monkeypatch.delenv(options.ENV_WARM_START, raising=False)
    monkeypatch.delenv(options.ENV_DISABLE_CACHE, raising=False)
    return tmp_path / "cache" / "graphs"


@pytest.fixture
def captures(monkeypatch):
    """Counts the captures OptimizedModule._specialize runs."""
    calls = []
    real = module.capture
    monkeypatch.setattr(module, "capture", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def _args():
    return [torch.randn(4, 8, generator=torch.Generator().manual_seed(0)), 2.0]


def _specialize(model, args=None):
    return fuseforge.optimize(model)._specialize(args or _args(), CPU)


def _entry(cache):
    entries = list(cache.glob("*.pt"))
    assert len(entries) == 1, entries
    return entries[0]


def test_a_stored_graph_loads_as_captured(cache):
    model = Block().eval()
    args = _args()
    captured = capture(model, args, name="Block")
    key = plan_cache.key(model, args, "fp32")
    plan_cache.store(key, captured)
    loaded = plan_cache.load(key)
    assert loaded is not None and loaded.text == captured.text
    assert loaded.input_bindings == captured.input_bindings and loaded.output_names == captured.output_names
    assert loaded.output_tree == captured.output_tree and loaded.mutations == captured.mutations
    assert loaded.constants.keys() == captured.constants.keys() and captured.constants
    for name, t in captured.constants.items():
        torch.testing.assert_close(loaded.constants[name], t, rtol=0, atol=0)
    assert loaded.specialized_scalars == captured.specialized_scalars
    assert loaded.output_constants == captured.output_constants == {2: 3}
    assert loaded.opaque_targets == captured.opaque_targets


def test_a_second_module_of_an_equal_model_does_not_capture(cache, captures):
    first = _specialize(Block().train())
    model = Block().train()  # other weights: they are read at call time
    reference = copy.deepcopy(model)
    fast = fuseforge.optimize(model)
    second = fast._specialize(_args(), CPU)
    assert len(captures) == 1 and second.captured.text == first.captured.text
    args = _args()
    out, expected = fast._run(second, second.gather(args), args), reference(*args)
    torch.testing.assert_close(out["y"], expected["y"], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(model.bn.running_var, reference.bn.running_var)  # the buffer write-back
    assert out["rest"][1] == 3


SCRIPT = """
import sys
import torch
import fuseforge
from warm_model import Net

if sys.argv[1] == "warm":
    def refuse(*args, **kwargs):
        raise AssertionError("torch.export ran on a warm start")
    torch.export.export = refuse
torch.manual_seed(0)
model = Net().eval()
x = torch.randn(2, 6)
fast = fuseforge.optimize(model)
spec = fast._specialize([x], torch.device("cpu"))
out = fast._run(spec, spec.gather([x]), [x])
torch.testing.assert_close(out, model(x))
sys.stdout.write(spec.captured.text)
"""

MODEL = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 5)
        self.b = nn.Sequential(nn.LayerNorm(5), nn.GELU())

    def forward(self, x):
        return self.b(self.a(x)) {op}
"""


def _run_script(tmp_path, mode, op="* 2.0"):
    (tmp_path / "warm_model.py").write_text(MODEL.format(op=op))
    (tmp_path / "script.py").write_text(SCRIPT)
    package = Path(fuseforge.__file__).parents[1]
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{package}")
    env[options.ENV_CACHE_DIR] = str(tmp_path / "cache")
    env.pop(options.ENV_WARM_START, None)
    return subprocess.run(
        [sys.executable, str(tmp_path / "script.py"), mode], env=env, capture_output=True, text=True, timeout=300
    )


def test_a_new_process_starts_warm_without_torch_export(tmp_path):
    cold = _run_script(tmp_path, "cold")
    assert cold.returncode == 0, cold.stderr
    warm = _run_script(tmp_path, "warm")
    assert warm.returncode == 0, warm.stderr
    assert warm.stdout == cold.stdout and "graph" in cold.stdout
    changed = _run_script(tmp_path, "warm", op="* 3.0")  # the model's source changed: captured again
    assert changed.returncode != 0 and "torch.export ran on a warm start" in changed.stderr
    assert len(list((tmp_path / "cache" / "graphs").glob("*.pt"))) == 1


def _load_class(tmp_path, folder, op):
    """Net from a file of its own, imported under one module name (the edit of a model file)."""
    path = tmp_path / folder / "edited_model.py"
    path.parent.mkdir()
    path.write_text(MODEL.format(op=op))
    spec = importlib.util.spec_from_file_location("edited_model", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["edited_model"] = mod
    spec.loader.exec_module(mod)
    return mod.Net


def test_a_changed_model_source_misses_and_leaves_the_old_entry(cache, tmp_path, captures, monkeypatch):
    monkeypatch.delitem(sys.modules, "edited_model", raising=False)
    x = [torch.randn(2, 6)]
    old = _load_class(tmp_path, "a", "* 2.0")()
    _specialize(old, x)
    entry = _entry(cache)
    new = _load_class(tmp_path, "b", "* 4.0")()
    assert plan_cache.key(new, x, "fp32") != entry.stem
    spec = _specialize(new, x)
    assert len(captures) == 2 and "4" in spec.captured.text and entry.exists()


def _key(model, args=None, precision="fp32"):
    return plan_cache.key(model, args or _args(), precision)


def test_the_key_follows_what_capture_depends_on(cache, monkeypatch):
    torch.manual_seed(0)
    model = Block().eval()
    key = _key(model)
    assert key is not None and key == _key(model)
    with torch.no_grad():
        model.lin.weight.add_(1.0)  # weights are read at call time: the graph stays valid
    assert _key(model) == key
    assert _key(model, precision="tf32") != key
    assert _key(model, [_args()[0], 3.0]) != key  # a number capture may bake in
    assert _key(model, [_args()[0].double(), 2.0]) != key
    assert _key(model.train()) != key
    model.eval()
    model.scale = 0.25
    assert _key(model) != key
    model.scale = 0.5
    shift = model.shift
    model.shift = shift + 1  # a constant of the graph
    assert _key(model) != key
    model.shift = shift.clone()
    assert _key(model) == key
    model.lin.weight = nn.Parameter(torch.randn(8, 8, dtype=torch.float64))
    assert _key(model) != key


def test_another_fuseforge_torch_or_capture_code_misses(cache, captures, monkeypatch):
    model = Block().eval()
    _specialize(model)
    monkeypatch.setattr(fuseforge, "__version__", fuseforge.__version__ + ".dev1")
    assert plan_cache.load(_key(model)) is None
    _specialize(model)
    monkeypatch.setattr(torch, "__version__", "0.0.1")
    _specialize(model)
    monkeypatch.setattr(plan_cache, "_code_digest", lambda: "another build")  # capture code or core rebuilt
    _specialize(model)
    assert len(captures) == 4 and len(list(cache.glob("*.pt"))) == 4


def _unreadable(cache, caplog, captures, damage):
    model = Block().eval()
    first = _specialize(model)
    entry = _entry(cache)
    damage(entry)
    with caplog.at_level(logging.WARNING, logger="fuseforge"):
        again = _specialize(model)
    warnings = [r.getMessage() for r in caplog.records if "warm-start cache entry" in r.getMessage()]
    assert len(warnings) == 1 and str(entry) in warnings[0] and "capturing again" in warnings[0], warnings
    assert len(captures) == 2 and again.captured.text == first.captured.text
    assert plan_cache.load(entry.stem) is not None  # captured again and kept again
    return warnings[0]


def test_a_corrupt_entry_is_deleted_and_captured_again(cache, caplog, captures):
    _unreadable(cache, caplog, captures, lambda p: p.write_bytes(os.urandom(2000)))


def test_a_truncated_entry_is_deleted_and_captured_again(cache, caplog, captures):
    _unreadable(cache, caplog, captures, lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]))


def test_an_entry_of_another_shape_is_deleted_and_captured_again(cache, caplog, captures):
    def reshape(path):
        entry = torch.load(path, weights_only=True)
        entry["input_bindings"] = [(name, "weird", source) for name, _, source in entry["input_bindings"]]
        torch.save(entry, path)

    assert "malformed input binding" in _unreadable(cache, caplog, captures, reshape)


def test_an_entry_of_another_key_is_not_trusted(cache, caplog, captures):
    def swap(path):
        entry = torch.load(path, weights_only=True)
        entry["key"] = "0" * 64
        torch.save(entry, path)

    _unreadable(cache, caplog, captures, swap)


def test_an_entry_the_compiler_rejects_is_deleted_and_captured_again(cache, caplog, captures):
    def garble(path):
        entry = torch.load(path, weights_only=True)
        entry["text"] = entry["text"].replace("graph", "grph", 1)
        torch.save(entry, path)

    assert "does not compile" in _unreadable(cache, caplog, captures, garble)


@pytest.mark.parametrize("variable, value", [(options.ENV_WARM_START, "0"), (options.ENV_DISABLE_CACHE, "1")])
def test_the_switches_turn_it_off(cache, captures, monkeypatch, variable, value):
    monkeypatch.setenv(variable, value)
    model = Block().eval()
    assert _key(model) is None
    _specialize(model)
    _specialize(model)
    assert len(captures) == 2 and not cache.exists()


def test_a_model_without_source_is_not_kept(cache, captures):
    namespace: dict = {}
    exec(textwrap.dedent(MODEL.format(op="+ 1")), namespace)  # a class no file defines
    model = namespace["Net"]()
    assert plan_cache.key(model, [torch.randn(2, 6)], "fp32") is None
    _specialize(model, [torch.randn(2, 6)])
    assert len(captures) == 1 and not cache.exists()
