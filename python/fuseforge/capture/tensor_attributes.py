"""Plain tensor attributes that forward writes (a recurrent state kept as
`self.h`), traced as buffers.

torch.export takes a plain tensor attribute as a constant: written in place
it refuses the model ("Constant h is mutated in the forward method"), and
reassigned (`self.h = f(self.h)`) it only warns and bakes in the first
value, so later calls would read a stale state. While
`tensor_attributes_as_buffers` is active, such attributes are non-persistent
buffers and a reassignment of one with a tensor of its shape and dtype
writes into it: export records either form as a buffer write-back, which
the runtime applies to the attribute in place, and the next call reads the
new value as eager's would. The state carried to the next call is detached
(what a training loop over a recurrent state does; eager's state could
keep the step's graph alive, which a second backward through it needs
retain_graph for). The model is put back as it was on exit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

#: What export says of a written tensor attribute (a warning or an error).
WRITTEN = ("was assigned during export", "is mutated in the forward method")


def plain_tensors(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The module's own tensor attributes that are neither parameters nor buffers."""
    return [
        (name, v) for name, v in vars(module).items() if isinstance(v, torch.Tensor) and not isinstance(v, nn.Parameter)
    ]


@contextlib.contextmanager
def tensor_attributes_as_buffers(model: nn.Module) -> Iterator[None]:
    moved = [(m, name, v) for m in model.modules() for name, v in plain_tensors(m)]
    owners = {(id(m), name) for m, name, _ in moved}
    # The buffers forward assigned: it writes the new value into the buffer
    # (the write-back the trace records), then the buffer's slot holds the
    # value itself (with its graph) for the rest of forward, which ends with
    # the buffer back in place.
    assigned: dict[tuple[nn.Module, str], torch.Tensor] = {}
    # Only forward's own writes: export and AOTAutograd swap the traced
    # tensors into the buffers by assignment too, around forward.
    in_forward = [False]
    for m, name, v in moved:
        del m.__dict__[name]
        m.register_buffer(name, v, persistent=False)
    setattr_before = nn.Module.__setattr__
    forward = model.forward

    def write_in_place(self: nn.Module, name: str, value: Any) -> None:
        buffer = self._buffers.get(name) if in_forward[0] and (id(self), name) in owners else None
        if (
            isinstance(value, torch.Tensor)
            and buffer is not None
            and value.shape == buffer.shape
            and value.dtype == buffer.dtype
        ):
            original = assigned.setdefault((self, name), buffer)
            original.copy_(value.detach())
            self._buffers[name] = value
            return
        setattr_before(self, name, value)

    def fresh_forward(*args: Any, **kwargs: Any) -> Any:
        in_forward[0] = True
        try:
            return forward(*args, **kwargs)
        finally:
            in_forward[0] = False
            for (m, name), original in assigned.items():
                m._buffers[name] = original
            assigned.clear()

    nn.Module.__setattr__ = write_in_place  # type: ignore[method-assign]
    own_forward = model.__dict__.get("forward")
    model.__dict__["forward"] = fresh_forward
    try:
        yield
    finally:
        nn.Module.__setattr__ = setattr_before  # type: ignore[method-assign]
        if own_forward is None:
            del model.__dict__["forward"]
        else:
            model.__dict__["forward"] = own_forward
        for m, name, v in moved:
            m._buffers.pop(name, None)
            m._non_persistent_buffers_set.discard(name)
            m.__dict__[name] = v
