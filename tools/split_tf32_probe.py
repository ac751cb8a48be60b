"""Probe: can cuBLAS TF32 GEMMs give fp32-accurate results through operand splitting?

Each fp32 operand X splits into X_hi (rounded to TF32) and X_lo = X - X_hi. Timed on
the problems' GEMM shapes, cold L2, CUDA events, median of 15 (B's splits are
precomputed, as cached weights would be; A's split is timed):
  fp32  cuBLAS fp32 (eager's default)      tf32  one plain TF32 GEMM
  3cat  one TF32 GEMM over [A_hi, A_hi, A_lo] @ [B_hi; B_lo; B_hi] (K tripled)
  3add  three TF32 GEMMs summed in fp32
Errors are max abs vs an fp64 product. Run on a GPU: python tools/split_tf32_probe.py
"""

import statistics

import torch

torch.backends.cudnn.allow_tf32 = False
dev = "cuda"
flush = torch.empty(512 << 20, dtype=torch.uint8, device=dev)


def tf32_hi(x):
    return ((x.view(torch.int32) + 0x1000) & -8192).view(torch.float32)


def bench(fn, reps=15):
    for _ in range(3):
        fn()
    ts = []
    for _ in range(reps):
        flush.zero_()
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    return statistics.median(ts)


shapes = [
    ("gemm_sigmoid", 1, 1024, 8192, 8192),
    ("mlp_up", 1, 4096, 8192, 2048),
    ("mlp_down", 1, 4096, 2048, 8192),
    ("lin_gelu_ln", 1, 8192, 4096, 2048),
    ("lin_swish_sum", 1, 2048, 4096, 4096),
    ("bmm_tb", 64, 512, 768, 1024),
    ("attn_qk", 256, 1024, 1024, 64),
    ("attn_pv", 256, 1024, 64, 1024),
    ("gemm_scale_bn", 1, 16384, 4096, 4096),
]
print(
    f"{'shape':14} {'fp32 ms':>8} {'tf32 ms':>8} {'3cat ms':>8} {'3cat mm':>8} {'3add ms':>8} | {'err fp32':>9} {'err tf32':>9} {'err 3cat':>9} {'err 3add':>9}  TF/s(3cat)"
)
for name, b, M, N, K in shapes:
    torch.manual_seed(0)
    A = torch.randn(b, M, K, device=dev)
    B = torch.randn(b, K, N, device=dev)
    ref = torch.matmul(A.double(), B.double())
    Bh = tf32_hi(B)
    Bl = B - Bh
    Bcat = torch.cat([Bh, Bl, Bh], dim=1).contiguous()

    def split_cat():
        Ah = tf32_hi(A)
        Al = A - Ah
        return torch.cat([Ah, Ah, Al], dim=2)

    torch.backends.cuda.matmul.allow_tf32 = False
    t32 = bench(lambda: torch.matmul(A, B))
    e32 = (torch.matmul(A, B).double() - ref).abs().max().item()
    torch.backends.cuda.matmul.allow_tf32 = True
    ttf = bench(lambda: torch.matmul(A, B))
    etf = (torch.matmul(A, B).double() - ref).abs().max().item()
    Acat = split_cat()
    tcat = bench(lambda: torch.matmul(split_cat(), Bcat))
    tcat_mm = bench(lambda: torch.matmul(Acat, Bcat))
    ecat = (torch.matmul(split_cat(), Bcat).double() - ref).abs().max().item()

    def three_add():
        Ah = tf32_hi(A)
        Al = A - Ah
        C = torch.matmul(Ah, Bh)
        C += torch.matmul(Ah, Bl)
        C += torch.matmul(Al, Bh)
        return C

    tadd = bench(three_add)
    eadd = (three_add().double() - ref).abs().max().item()
    flop = 2 * b * M * N * K
    print(
        f"{name:14} {t32:8.3f} {ttf:8.3f} {tcat:8.3f} {tcat_mm:8.3f} {tadd:8.3f} | {e32:9.2e} {etf:9.2e} {ecat:9.2e} {eadd:9.2e}  {flop / tcat / 1e9:6.1f} (mm only {flop * 3 / tcat_mm / 1e9:6.1f} raw)"
    )
    torch.cuda.empty_cache()
