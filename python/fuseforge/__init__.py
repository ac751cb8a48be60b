"""fuseforge: an operator-fusion compiler for PyTorch models on NVIDIA GPUs.

fast = fuseforge.optimize(model)          # drop-in nn.Module
compiled = torch.compile(model, backend="fuseforge")
"""

from __future__ import annotations

__version__ = "0.1.0"

from fuseforge.runtime.module import OptimizedModule, optimize

__all__ = ["OptimizedModule", "optimize", "__version__"]
