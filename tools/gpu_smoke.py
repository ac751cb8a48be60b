"""Step-by-step smoke test of the runtime inside a torch process (device debugging)."""

import faulthandler
import sys

import torch

faulthandler.enable()
from fuseforge._native import core  # noqa: E402

print("driver", core.driver_available(), flush=True)
x = torch.randn(1024, device="cuda")
print("arch", core.device_arch(0), "sms", core.device_sm_count(0), flush=True)
print("nvrtc", core.nvrtc_version(), flush=True)
plan = core.compile(
    """graph @g(%x: f32[1024]) {
  %0 = mul(%x, 2.0) : f32[1024]
  return %0
}""",
    core.CompileOptions(),
).plan
k = plan.kernels[0]
print("compile", core.nvrtc_compile(k.translation_unit, k.name, 90)[:2], flush=True)
(kern,) = core.load_kernels(plan.kernels, core.device_arch(0))
print("loaded", kern, flush=True)
y = torch.empty_like(x)
kern.launch(0, [y.data_ptr(), x.data_ptr()], [], torch.cuda.current_stream().cuda_stream)
torch.cuda.synchronize()
print("launch ok", torch.equal(y, x * 2), flush=True)
sys.exit(0)
