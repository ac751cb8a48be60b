"""Convs with few multiply-adds per output, each followed by a relu and a
scale: fuseforge with its default conv policy (direct kernels where the cost
model prefers them), with FUSEFORGE_CONV_KERNELS=off (cuDNN, then the
epilogue kernel), and eager; ms per call (cold L2, CUDA events, median of 30)
and the plan's kernels. Accuracy is tests/python/test_conv_direct_gpu.py's.

  python3 tools/direct_conv_bench.py      (writes $OUT/direct_bench.json, or /tmp's)
"""

import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
import fuseforge
from test_conv_direct_gpu import ConvBlock

CONFIGS = {
    "bn_train_conv 96x6x160x160->48": (dict(cin=6, cout=48, k=3), (96, 6, 160, 160)),
    "first_layer 128x3x128x128->32 p1": (dict(cin=3, cout=32, k=3, padding=1, bias=False), (128, 3, 128, 128)),
    "first_layer 128x3x256x256->16": (dict(cin=3, cout=16, k=3), (128, 3, 256, 256)),
    "depthwise 64x128x56x56 s1": (dict(cin=128, cout=128, k=3, padding=1, groups=128), (64, 128, 56, 56)),
    "depthwise 64x96x112x112 s2": (dict(cin=96, cout=96, k=3, stride=2, padding=1, groups=96), (64, 96, 112, 112)),
    "avgpool_conv 128x8x160x160->32": (dict(cin=8, cout=32, k=3), (128, 8, 160, 160)),
    "k144 64x16x64x64->64": (dict(cin=16, cout=64, k=3, padding=1), (64, 16, 64, 64)),
}
flush = torch.empty(256 * 1024 * 1024 // 4, device="cuda")  # larger than L2: each call starts cold


def time_ms(f, x, reps=30):
    ts = []
    for _ in range(reps + 3):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        f(x)
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts[3:])


out = {}
for name, (kw, shape) in CONFIGS.items():
    torch.manual_seed(0)
    model = ConvBlock(**kw).cuda().eval()
    x = torch.randn(shape, device="cuda")
    row = {}
    with torch.no_grad():
        row["eager_ms"] = time_ms(model, x)
        for policy in ("direct", "off"):
            os.environ["FUSEFORGE_CONV_KERNELS"] = policy
            fast = fuseforge.optimize(model)
            fast(x)
            row[f"{policy}_ms"] = time_ms(fast, x)
            row[f"{policy}_kernels"] = [k.name for s in fast.specializations() for k in s.compiled.plan.kernels]
    out[name] = row
    print(name, {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
json.dump(out, open(os.path.join(os.environ.get("OUT", "/tmp"), "direct_bench.json"), "w"), indent=1)
