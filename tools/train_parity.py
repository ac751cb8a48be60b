"""SGD steps of a problem's model, eager and through fuseforge side by side,
from the same weights on the same inputs: does training through the
compiled forward and backward follow eager's loss curve?

    python tools/train_parity.py PROBLEM.py [--steps 200] [--lr 0.01]
        [--json out.json] [--plot out.png]

The loss is the mean squared distance of the floating-point outputs to fixed
random targets; each step draws fresh inputs (get_inputs under a per-step
seed). Prints the largest relative loss difference over the steps and exits
1 where it exceeds --tolerance (default 1e-3).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys

import torch
from torch.utils import _pytree as pytree

import fuseforge
from fuseforge.harness.problem import build_model, problem_inputs, problem_name


def _floating(out: object) -> list[torch.Tensor]:
    return [o for o in pytree.tree_leaves(out) if isinstance(o, torch.Tensor) and o.is_floating_point()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("problem")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--tolerance", type=float, default=1e-3)
    parser.add_argument("--json")
    parser.add_argument("--plot")
    args = parser.parse_args(argv)

    mod, reference = build_model(args.problem, "train", "cuda")
    model = copy.deepcopy(reference)
    fast = fuseforge.optimize(model)
    opts = [torch.optim.SGD(m.parameters(), lr=args.lr) for m in (reference, model)]
    targets: list[torch.Tensor] | None = None
    curves: dict[str, list[float]] = {"eager": [], "fuseforge": []}
    for step in range(args.steps):
        inputs = problem_inputs(mod, step, "cuda")
        for name, m, opt in (("eager", reference, opts[0]), ("fuseforge", fast, opts[1])):
            opt.zero_grad(set_to_none=True)
            outs = _floating(m(*inputs))
            if targets is None:
                gen = torch.Generator(device="cuda").manual_seed(1234)
                targets = [torch.randn(o.shape, device="cuda", dtype=o.dtype, generator=gen) for o in outs]
            loss = sum(torch.nn.functional.mse_loss(o, t) for o, t in zip(outs, targets))
            loss.backward()
            opt.step()
            curves[name].append(float(loss.detach()))
    graphs = [g for step in fast._ff_training.values() for g in step.graphs]
    if len(graphs) < 2:
        print(f"{problem_name(args.problem)}: fuseforge did not compile a training step (it ran eagerly)")
        return 2
    rel = [abs(f - e) / max(abs(e), 1e-12) for e, f in zip(curves["eager"], curves["fuseforge"])]
    worst = max(range(len(rel)), key=rel.__getitem__)
    print(
        f"{problem_name(args.problem)}: {args.steps} SGD steps (lr {args.lr}); loss {curves['eager'][0]:.6g} -> "
        f"{curves['eager'][-1]:.6g} eager, {curves['fuseforge'][-1]:.6g} fuseforge; largest relative "
        f"difference {rel[worst]:.2e} at step {worst}; fuseforge's "
        + ", ".join(f"{g.captured.text.split('(')[0][7:]} graph {len(g.compiled.plan.kernels)} kernels" for g in graphs)
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"problem": problem_name(args.problem), "lr": args.lr, **curves, "relative": rel}, f)
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
        top.plot(curves["eager"], label="eager")
        top.plot(curves["fuseforge"], "--", label="fuseforge")
        top.set_ylabel("loss")
        top.legend()
        top.set_title(f"{problem_name(args.problem)}: SGD, lr {args.lr}")
        bottom.semilogy([max(r, 1e-12) for r in rel])
        bottom.axhline(args.tolerance, color="red", lw=0.8)
        bottom.set_ylabel("relative difference")
        bottom.set_xlabel("step")
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)
    return 0 if rel[worst] <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
