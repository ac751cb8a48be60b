"""Data-parallel training through the fuseforge backend:
`torch.compile(DDP(model), backend="fuseforge")` on several GPUs, one
process per GPU through torch.distributed (NCCL), against one GPU's eager
step over the whole batch.

    python tools/ddp_check.py PROBLEM.py [--gpus 2] [--steps 3] [--json out.json]
        [--dist-backend nccl|gloo]

With --dist-backend gloo the ranks may share GPUs (rank r runs on visible
GPU r mod their number): the same compiled graphs, DDP buckets and
gradient rule, with gloo's all-reduce in place of NCCL's, on a machine
with fewer GPUs than ranks.

Every rank builds the problem's model (same weights). Each step draws
fresh inputs, broadcast from rank 0, and every rank takes its share of the
batch (dim 0 of every tensor input). A step is the forward, the loss
(harness/train.py's training_loss, the sum of the outputs) and its
backward; DDP averages the ranks' gradients, so they are the gradients of
the whole batch's loss divided by the number of ranks, which is what the
single-GPU reference computes. After each step every parameter's gradient
is judged by the one accuracy rule, eager's computation being eager DDP on
the same shards: within atol=rtol=1e-4 of eager DDP's gradient, or error
against the float64 single-GPU reference at most twice eager DDP's. The
ranks' gradients must be bitwise equal. The single-GPU model then takes an
SGD step (scaled to its largest gradient), and both DDP models continue
from its weights, so each step is judged at the reference's weights.
Both DDP runs' distance to the single-GPU fp32 step is printed too:
splitting the batch alone moves the gradients by about that much.

Models whose forward couples the samples of a batch (train-mode BatchNorm
over the batch) compute other statistics per shard and are refused with
one line. Exits 1 when a step's gradients are not correct or a graph ran
eagerly.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import socket
import sys
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

# NVLink multicast stays off wherever NCCL runs on a shared host.
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _couples_batch(model: nn.Module) -> str | None:
    for name, m in model.named_modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training:
            return f"{name or 'the model'} is a train-mode {type(m).__name__}: each rank normalizes its own shard"
    return None


def _shard(x: Any, rank: int, world: int) -> Any:
    if not isinstance(x, torch.Tensor) or x.dim() == 0:
        return x
    if x.shape[0] % world:
        raise ValueError(f"an input's batch dimension ({x.shape[0]}) does not split over {world} GPUs")
    return x.chunk(world)[rank].contiguous()


def _sgd(model: nn.Module, lr: float) -> None:
    """An SGD update scaled by the largest gradient magnitude: a loss that
    sums large outputs has large gradients, and a plain step would send the
    weights (and every later comparison) off to infinity."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    peak = max((float(g.abs().max()) for g in grads), default=0.0)
    scale = lr / peak if peak > 0 else 0.0
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p -= scale * p.grad
            p.grad = None


def _take_weights(reference: nn.Module, models: list[nn.Module]) -> None:
    """Every model continues from rank 0's single-GPU weights, so that each
    step's gradients are judged at the weights the reference had: models
    updated by their own (equally correct) gradients drift apart, and a
    later step would compare gradients of different weights."""
    with torch.no_grad():
        for p in reference.parameters():
            dist.broadcast(p, 0)
        for model in models:
            for p, q in zip(model.parameters(), reference.parameters()):
                p.copy_(q)
                p.grad = None


def _worker(rank: int, world: int, args: argparse.Namespace, port: int) -> None:
    from fuseforge.harness.check import float64_inputs, in_float64
    from fuseforge.harness.compare import max_err
    from fuseforge.harness.problem import build_model, problem_inputs
    from fuseforge.harness.train import describe_grads, judge, parameter_grads, train_step
    from fuseforge.runtime import training

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    if args.dist_backend == "nccl":
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    warnings: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            warnings.append(record.getMessage())

    logging.getLogger("fuseforge").addHandler(Collect(logging.WARNING))
    try:
        mod, model = build_model(args.problem, "train", str(device))
        refused = _couples_batch(model)
        if refused:
            raise ValueError(refused)
        reference = copy.deepcopy(model)  # one GPU, the whole batch
        eager_ddp = DDP(copy.deepcopy(model), device_ids=[device.index])
        fast_ddp = torch.compile(DDP(copy.deepcopy(model), device_ids=[device.index]), backend="fuseforge")
        steps = []
        for step in range(args.steps):
            inputs = problem_inputs(mod, step, str(device))
            for x in inputs:
                if isinstance(x, torch.Tensor):
                    dist.broadcast(x, 0)
            shard = [_shard(x, rank, world) for x in inputs]
            if rank == 0:
                fp64_model = copy.deepcopy(reference)
                train_step(reference, inputs)
                want = [g / world for g in parameter_grads(reference)]
            train_step(eager_ddp, shard)
            train_step(fast_ddp, shard)
            got, eager_got = parameter_grads(fast_ddp.module), parameter_grads(eager_ddp.module)
            # Every rank holds the averaged gradients: they must agree bitwise.
            spread = torch.cat([g.flatten() for g in got])
            if args.dist_backend == "gloo":  # gloo gathers host tensors only
                spread = spread.cpu()
            gathered = [torch.empty_like(spread) for _ in range(world)]
            dist.all_gather(gathered, spread)
            if rank == 0:

                def fp64(model: nn.Module = fp64_model) -> list[torch.Tensor]:
                    with in_float64(model):
                        train_step(model, float64_inputs(inputs))
                        return [g / world for g in parameter_grads(model)]

                # The one rule, eager's computation being eager DDP on the same shards.
                verdict = judge(got, eager_got, fp64)
                steps.append(
                    {
                        "step": step,
                        "grads_correct": verdict.correct,
                        "verdict": describe_grads(verdict, model, got, eager_got),
                        "ranks_equal": all(torch.equal(g, gathered[0]) for g in gathered),
                        "err_vs_one_gpu": max_err(got, want),
                        "eager_ddp_err_vs_one_gpu": max_err(eager_got, want),
                    }
                )
                _sgd(reference, args.lr)
            _take_weights(reference, [eager_ddp.module, fast_ddp.module])
        if rank == 0:
            compiled = sorted(g.kind for g in list(training._LIVE))
            result = {
                "problem": args.problem,
                "gpus": world,
                "steps": steps,
                "graphs": compiled,
                "eager_fallbacks": [w for w in warnings if "eager" in w],
            }
            result["ok"] = (
                all(s["grads_correct"] and s["ranks_equal"] for s in steps)
                and bool(compiled)
                and not result["eager_fallbacks"]
            )
            with open(args.result, "w") as f:
                json.dump(result, f, indent=1)
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("problem")
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--json")
    parser.add_argument("--dist-backend", choices=["nccl", "gloo"], default="nccl")
    args = parser.parse_args(argv)
    if args.dist_backend == "nccl" and torch.cuda.device_count() < args.gpus:
        print(f"ddp_check: {args.gpus} GPUs asked for, {torch.cuda.device_count()} visible", file=sys.stderr)
        return 2
    args.result = args.json or os.path.join(os.environ.get("TMPDIR", "/tmp"), f"ddp_check_{os.getpid()}.json")
    try:
        mp.spawn(_worker, args=(args.gpus, args, _free_port()), nprocs=args.gpus)
    except mp.ProcessRaisedException as e:
        print(f"ddp_check: {str(e).strip().splitlines()[-1]}", file=sys.stderr)
        return 1
    with open(args.result) as f:
        result = json.load(f)
    for s in result["steps"]:
        print(
            f"step {s['step']}: gradients {'correct' if s['grads_correct'] else 'WRONG'} ({s['verdict']}); "
            f"ranks {'equal' if s['ranks_equal'] else 'DIFFER'}; from one GPU's: {s['err_vs_one_gpu']:.1e} "
            f"(eager DDP {s['eager_ddp_err_vs_one_gpu']:.1e})"
        )
    print(f"compiled graphs: {', '.join(result['graphs']) or 'none'}")
    for w in result["eager_fallbacks"]:
        print(f"eager: {w}")
    print(
        f"{result['problem']}: DDP on {result['gpus']} GPUs {'matches' if result['ok'] else 'does NOT match'} one GPU"
    )
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
