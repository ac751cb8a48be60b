"""GEMM throughput of fuseforge's generated kernels against eager (cuBLAS) on
the matmul shapes of the problems: TFLOP/s and fraction of the precision's
dense tensor-core peak (fuseforge.harness.roofline: a third of TF32's for f32, whose
3xTF32 issues three TF32 MMAs per product; FP16's for f16/bf16), plus max abs
error against fp64 for both and fuseforge's bias toward zero over eager's
(errors summed along the fp64 result's signs per row, the largest row: a
truncating accumulation shows up here long before in the max error). `--precision tf32`: the f32 shapes under the
opt-in TF32 policy, eager (cuBLAS) with TF32 too.
Usage: python tools/gemm_roofline.py [--precision fp32|tf32]"""

from __future__ import annotations

import argparse
import os

import torch

os.environ.setdefault("FUSEFORGE_GEMM", "1")  # f16/bf16 GEMM kernels are opt-in

import fuseforge
from fuseforge.harness.roofline import roofline
from fuseforge.runtime.precision import precision_context
from fuseforge.runtime.timing import time_cuda

#: (name, batch, M, N, K, dtype, weight transposed): the matmuls of the problem files.
SHAPES = [
    ("gemm_sigmoid / divide_sum", 1, 1024, 8192, 8192, torch.float32, True),
    ("gemm_scale_batchnorm", 1, 16384, 4096, 4096, torch.float32, True),
    ("mlp_residual up", 1, 4096, 8192, 2048, torch.float32, True),
    ("mlp_residual down", 1, 4096, 2048, 8192, torch.float32, True),
    ("linear_gelu_layernorm", 1, 8192, 4096, 2048, torch.float32, True),
    ("linear_swish_sum", 1, 2048, 4096, 4096, torch.float32, True),
    ("bmm_transposed_bias", 64, 512, 768, 1024, torch.float32, True),
    ("attention QK^T", 256, 1024, 1024, 64, torch.float32, True),
    ("attention PV", 256, 1024, 64, 1024, torch.float32, False),
    ("linear_relu_half", 1, 8192, 4096, 4096, torch.float16, True),
]


class MatMul(torch.nn.Module):
    def __init__(self, transposed: bool):
        super().__init__()
        self.transposed = transposed

    def forward(self, a, b):
        return torch.matmul(a, b.transpose(-1, -2) if self.transposed else b)


def _bias_toward_zero(y: torch.Tensor, ref64: torch.Tensor) -> float:
    return float(((y.double() - ref64) * ref64.sign()).sum(-1).abs().max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--precision", default="fp32", choices=["fp32", "tf32"])
    precision = parser.parse_args().precision
    print(
        f"{'shape':28} {'dtype':9} {'eager ms':>9} {'ff ms':>8} {'x eager':>8} {'ff TFLOP/s':>11} {'of peak':>8} "
        f"{'err ff':>9} {'err eager':>9} {'bias/eager':>10} kernel"
    )
    for name, batch, m, n, k, dtype, transposed in SHAPES:
        if precision == "tf32" and dtype != torch.float32:
            continue
        torch.manual_seed(0)
        a = torch.randn(batch, m, k, device="cuda", dtype=dtype).squeeze(0)
        b = (
            torch.randn(batch, n, k, device="cuda", dtype=dtype)
            if transposed
            else torch.randn(batch, k, n, device="cuda", dtype=dtype)
        )
        b = b.squeeze(0)
        model = MatMul(transposed)
        fast = fuseforge.optimize(model, precision=precision)
        with torch.no_grad(), precision_context(precision):
            out, ref = fast(a, b), model(a, b)
            ref64 = model(a.double(), b.double())  # f64: no TF32
            plan = fast.specializations()[0].compiled.plan
            kernels = [kk.name for kk in plan.kernels if kk.kind == "gemm"]
            t_ff = time_cuda(lambda: fast(a, b))
            t_eager = time_cuda(lambda: model(a, b))
        roof = roofline(plan, torch.cuda.get_device_name(), t_ff, precision)
        err_ff = float((out.double() - ref64).abs().max())
        err_eager = float((ref.double() - ref64).abs().max())
        bias = _bias_toward_zero(out, ref64) / max(_bias_toward_zero(ref, ref64), 1e-300)
        print(
            f"{name:28} {str(dtype)[6:]:9} {t_eager:9.3f} {t_ff:8.3f} {t_eager / t_ff:8.2f} {roof['tflops']:11.1f} "
            f"{roof['tensor_peak_fraction'] or 0:8.1%} {err_ff:9.2e} {err_eager:9.2e} {bias:10.2f} "
            f"{','.join(kernels) or 'ATen'}"
        )


if __name__ == "__main__":
    main()
