"""Checks a file written by `fuseforge emit` in a process that never imports
fuseforge: ModelNew gets Model's state_dict; in the model's own mode (or
--mode) its outputs and updated buffers must match Model's over several seeds
(atol=rtol=1e-4, or where eager itself is far from fp64 — TF32 convolutions —
no worse than twice eager's error against fp64, as `fuseforge run` judges);
--time also times Model and ModelNew the way fuseforge/runtime/timing.py does.

  python tools/check_emitted.py model_new.py [--mode train|eval] [--seeds N] [--time] [--json OUT]
                                [--bench REPORT.json --problem NAME] [--device cuda|cpu]

--device cpu (no timing there) checks the file's code paths without a GPU:
ModelNew then runs Model.forward and says so, which counts as a failure.

"graphs" in the output says, per kind of inputs ModelNew saw, whether it
replays a CUDA graph or runs plain and why (its third call captures one; the
timing's calls then replay it where it timed faster).

With --bench (a `fuseforge bench --json` report of the same machine) it adds
that report's in-process fuseforge_ms for the problem and the ratio
emitted_ms / fuseforge_ms (1.10 = emitted 10% slower).

Exit code 0 when correct. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import runpy
import sys
import warnings
from pathlib import Path

import torch
from torch.utils import _pytree as pytree


def _timing_module():
    """fuseforge/runtime/timing.py loaded by path (it imports only torch), not through the package."""
    path = Path(__file__).resolve().parents[1] / "python" / "fuseforge" / "runtime" / "timing.py"
    spec = importlib.util.spec_from_file_location("_ff_timing_standalone", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _inputs(ns: dict, seed: int, device: str, dtype: torch.dtype | None = None) -> list:
    torch.manual_seed(seed)
    out = []
    for x in ns["get_inputs"]():
        if isinstance(x, torch.Tensor):
            x = x.to(device)
            if dtype is not None and x.is_floating_point():
                x = x.to(dtype)
        out.append(x)
    return out


def _leaves(x) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(x) if isinstance(t, torch.Tensor)]


def _err(a, b) -> float:
    return max(
        [float((x.double() - y.double()).abs().nan_to_num(0.0).max()) if x.numel() else 0.0 for x, y in zip(a, b)]
        or [0.0]
    )


def _close(a, b) -> bool:
    return len(a) == len(b) and all(
        x.shape == y.shape
        and x.dtype == y.dtype
        and torch.allclose(x.double(), y.double(), rtol=1e-4, atol=1e-4, equal_nan=True)
        for x, y in zip(a, b)
    )


def _time(new: torch.nn.Module, model: torch.nn.Module, x: list) -> dict:
    """emitted_ms and eager_ms, timed side by side as fuseforge/runtime/timing.py does."""
    time_cuda = _timing_module().time_cuda
    with torch.no_grad():
        times = time_cuda({"emitted": lambda: new(*x), "eager": lambda: model(*x)})
    return {"emitted_ms": times["emitted"], "eager_ms": times["eager"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("emitted")
    parser.add_argument("--mode", choices=["train", "eval"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--time", action="store_true")
    parser.add_argument("--json")
    parser.add_argument("--bench", help="a fuseforge bench --json report to compare with (needs --time)")
    parser.add_argument("--problem", help="the problem's name in --bench (default: the emitted file's stem)")
    parser.add_argument("--device", default="cuda", help="cuda (default), or cpu to check without a GPU")
    args = parser.parse_args(argv)
    if args.time and args.device != "cuda":
        parser.error("--time needs --device cuda")
    ns = runpy.run_path(args.emitted, run_name="_ff_emitted")
    torch.manual_seed(0)
    model = ns["Model"](*ns["get_init_inputs"]()).to(args.device)
    if args.mode:
        model.train(args.mode == "train")
    new = ns["ModelNew"](*ns["get_init_inputs"]()).to(args.device)
    snapshot = copy.deepcopy(model.state_dict())
    new.load_state_dict(snapshot)
    new.train(model.training)
    row = {
        "file": args.emitted,
        "mode": "train" if model.training else "eval",
        "correct": True,
        "max_err_vs_eager": 0.0,
        "max_err_vs_fp64": 0.0,
    }
    caught = warnings.catch_warnings(record=True)
    fallbacks = caught.__enter__()
    warnings.simplefilter("always")
    for seed in range(args.seeds):
        x = _inputs(ns, seed, args.device)
        model.load_state_dict(snapshot)
        new.load_state_dict(snapshot)
        with torch.no_grad():
            ref, out = _leaves(model(*x)), _leaves(new(*x))
        buf_ok = _close([b for _, b in sorted(new.named_buffers())], [b for _, b in sorted(model.named_buffers())])
        m64 = copy.deepcopy(model)
        m64.load_state_dict(snapshot)
        with torch.no_grad():
            ref64 = _leaves(m64.double()(*_inputs(ns, seed, args.device, torch.float64)))
        err, err64, eager64 = _err(out, ref), _err(out, ref64), _err(ref, ref64)
        ok = buf_ok and (
            _close(out, ref) or (all(o.dtype == r.dtype for o, r in zip(out, ref)) and err64 <= 2 * eager64 + 1e-6)
        )
        row["correct"] &= ok
        row["max_err_vs_eager"] = max(row["max_err_vs_eager"], err)
        row["max_err_vs_fp64"] = max(row["max_err_vs_fp64"], err64)
    if args.time:
        row.update(_time(new, model, _inputs(ns, 1234, args.device)))
        row["speedup_vs_eager"] = row["eager_ms"] / row["emitted_ms"]
        if args.bench:
            entry = json.loads(Path(args.bench).read_text())["problems"].get(
                args.problem or Path(args.emitted).stem, {}
            )
            if entry.get("fuseforge_ms"):
                row["fuseforge_ms"] = entry["fuseforge_ms"]
                row["emitted_vs_fuseforge"] = row["emitted_ms"] / entry["fuseforge_ms"]
    caught.__exit__(None, None, None)
    # ModelNew warns when it runs Model.forward instead of its plan: then nothing fused was measured.
    # (A warning that its CUDA graph failed to capture is no fallback: the
    # fused kernels still ran; "graphs" says what each kind of inputs got.)
    row["fallbacks"] = sorted(
        {str(w.message) for w in fallbacks if "ModelNew" in str(w.message) and "Model.forward" in str(w.message)}
    )
    row["graphs"] = ns["_ff_graph_choices"](new) if "_ff_graph_choices" in ns else {}
    row["imported_fuseforge"] = any(m == "fuseforge" or m.startswith("fuseforge.") for m in sys.modules)
    print(json.dumps(row))
    if args.json:
        Path(args.json).write_text(json.dumps(row, indent=2))
    return 0 if row["correct"] and not row["imported_fuseforge"] and not row["fallbacks"] else 1


if __name__ == "__main__":
    sys.exit(main())
