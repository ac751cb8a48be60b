"""Times cuDNN convolution of the conv seed's shapes in NCHW vs channels-last
(TF32 as eager allows), to decide the conv layout policy."""

import torch

from fuseforge.runtime.timing import time_cuda

x = torch.rand(128, 64, 128, 128, device="cuda")
w = torch.randn(128, 64, 3, 3, device="cuda")
xl, wl = x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last)
with torch.no_grad():
    print("nchw conv ms", time_cuda(lambda: torch.conv2d(x, w)))
    print("nhwc conv ms", time_cuda(lambda: torch.conv2d(xl, wl)))
    print("to channels_last ms", time_cuda(lambda: x.to(memory_format=torch.channels_last)))
    y = torch.conv2d(xl, wl)
    print("nhwc->nchw copy ms", time_cuda(lambda: y.contiguous()))
