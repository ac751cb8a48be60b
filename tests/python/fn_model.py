"""Fn(fn, **modules): a module whose forward is `fn(module, *args)`, for tests
that check one small function's capture or kernels against eager."""

import inspect

from torch import nn


class _FnBase(nn.Module):
    def __init__(self, fn, **modules):
        super().__init__()
        self.fn = fn
        for k, m in modules.items():
            setattr(self, k, m)


def Fn(fn, **modules) -> nn.Module:
    """A module whose forward is `fn(module, *args)`, with fn's argument names."""

    def forward(self, *args):
        return self.fn(self, *args)

    params = list(inspect.signature(fn).parameters.values())[1:]
    forward.__signature__ = inspect.Signature(
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [p.replace(kind=inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in params]
    )
    cls = type("Fn", (_FnBase,), {"forward": forward})
    return cls(fn, **modules)
