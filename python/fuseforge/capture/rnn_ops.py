"""RNN calls traced as single ops, without tracing their decompositions.

torch.export learns the shapes of `aten.lstm` (and gru, rnn_tanh, rnn_relu) by
running their decompositions on fake tensors: one set of ops per time step
and layer, 3.5 s for a 2-layer LSTM over 256 steps, although fuseforge keeps
the op whole (an opaque library call). While capture traces, `opaque_rnns()`
routes those calls to `fuseforge::<name>` custom ops of the same schema whose
fake implementation only allocates the results; `restore_aten_targets` then
points the graph's nodes back at the ATen ops, so the plan is unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterator
from typing import Any

import torch
import torch.fx as fx
from torch.overrides import TorchFunctionMode

aten = torch.ops.aten

#: The RNN ops taken whole (their `input` overloads): hidden states taken and returned.
_RNNS = {"lstm": 2, "gru": 1, "rnn_tanh": 1, "rnn_relu": 1}

_ARGS = (
    "Tensor input, {hx}, Tensor[] params, bool has_biases, int num_layers, float dropout, bool train, "
    "bool bidirectional, bool batch_first"
)


def _results(inp: torch.Tensor, hx: list[torch.Tensor], bidirectional: bool, batch_first: bool) -> tuple:
    """Empty results with the shapes and strides ATen's RNNs return: the output
    [T, B, D * H] (made as that and transposed when batch_first), then the
    hidden states as given."""
    width = (2 if bidirectional else 1) * hx[0].shape[-1]
    if inp.dim() == 3 and batch_first:
        out = inp.new_empty((inp.shape[1], inp.shape[0], width)).transpose(0, 1)
    else:
        out = inp.new_empty((*inp.shape[:-1], width))
    return (out, *(h.new_empty(h.shape) for h in hx))


def _define(name: str, states: int) -> None:
    hx = "Tensor[] hx" if states > 1 else "Tensor hx"
    returns = ", ".join(["Tensor"] * (1 + states))
    torch.library.define(f"fuseforge::{name}", f"({_ARGS.format(hx=hx)}) -> ({returns})")
    target = getattr(aten, name).input

    # hx: a tensor, or a list of them where the op takes several (LSTM's h and c).
    def real(inp: torch.Tensor, hx: Any, params: list[torch.Tensor], *flags: Any) -> Any:
        return target(inp, hx, params, *flags)

    def fake(
        inp: torch.Tensor,
        hx: Any,
        params: list[torch.Tensor],
        has_biases: bool,
        num_layers: int,
        dropout: float,
        train: bool,
        bidirectional: bool,
        batch_first: bool,
    ) -> tuple:
        return _results(inp, list(hx) if states > 1 else [hx], bidirectional, batch_first)

    torch.library.impl(f"fuseforge::{name}", "CompositeExplicitAutograd")(real)
    torch.library.register_fake(f"fuseforge::{name}")(fake)


for _name, _states in _RNNS.items():
    _define(_name, _states)

_TO_ATEN = {getattr(torch.ops.fuseforge, n).default: getattr(aten, n).input for n in _RNNS}
#: The functions nn.LSTM, nn.GRU and nn.RNN call (torch._VF.<name>, also torch.<name>).
_FUNCTIONS = {getattr(torch._C._VariableFunctions, n): n for n in _RNNS}


def _rnn_name(func: Any, args: tuple) -> str | None:
    """The RNN `func` is, if it is one in its input form (not packed sequences)."""
    try:
        name = _FUNCTIONS.get(func)
    except TypeError:  # an unhashable callable
        return None
    if name is None:
        return None
    if len(args) != 9 or not isinstance(args[3], bool):  # the packed-sequence overload
        return None
    return name if isinstance(args[1], (list, tuple) if _RNNS[name] > 1 else torch.Tensor) else None


class _OpaqueRnns(TorchFunctionMode):
    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Collection[type],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        name = _rnn_name(func, args) if not kwargs else None
        if name is not None:
            return getattr(torch.ops.fuseforge, name)(*args)
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def opaque_rnns() -> Iterator[None]:
    """Within it, RNN calls trace as `fuseforge::` ops (see the module doc)."""
    with _OpaqueRnns():
        yield


def restore_aten_targets(graph: fx.Graph) -> bool:
    """Points `fuseforge::` RNN nodes back at the ATen ops they stand for;
    whether there were any."""
    restored = False
    for node in graph.nodes:
        if node.op == "call_function" and node.target in _TO_ATEN:
            node.target = _TO_ATEN[node.target]
            restored = True
    return restored
