"""Warm start: captured graphs kept on disk, so that a new process compiles a
model it has seen before without tracing it again (torch.export, the
decompositions and the lowering take seconds for a whole network).

An entry is one file, <cache dir>/graphs/<key>.pt, written by torch.save and
read with weights_only=True. The key (sha256) covers what capture's result
depends on: the source files of the model's classes (a class without source
makes the model uncacheable), its module tree with each module's plain
attributes, its parameters' and buffers' names and metadata (not values: they
are read at call time), the values of plain tensor attributes (capture bakes
them into the graph as constants), the call's arguments as the guard sees
them (and the values of non-tensor ones, which capture may bake in), the mode
and precision, fuseforge's capture code and core extension, and the torch
and fuseforge versions. An entry that does not load or validate is deleted, with a warning,
and the model is captured again.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import logging
import os
import sys
import tempfile
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from fuseforge._native import core
from fuseforge.capture import CapturedGraph, InputBinding
from fuseforge.runtime.options import warm_start_enabled
from fuseforge.runtime.precision import eager_conv_precision

log = logging.getLogger("fuseforge")

#: The layout of an entry; a change makes older entries misses.
FORMAT = 1
_FIELDS = (
    "format key text input_bindings output_names output_tree mutations constants "
    "specialized_scalars output_constants opaque_targets"
).split()
_BINDING_KINDS = ("user", "param", "buffer", "const", "scalar")
_PLAIN = (type(None), bool, int, float, str)
_said_uncacheable: set[str] = set()


class _Uncacheable(Exception):
    """The model, or a value capture returned, cannot be keyed or stored faithfully."""


def _directory() -> Path | None:
    if not warm_start_enabled():
        return None
    directory = core.cache_dir()  # the kernels' directory (FUSEFORGE_CACHE_DIR or the default)
    return Path(directory) / "graphs" if directory else None


def _plain(value: Any) -> bool:
    """Whether `value` round-trips through torch.load(weights_only=True) as itself."""
    if isinstance(value, _PLAIN):
        return True
    if isinstance(value, (tuple, list)):
        return all(_plain(v) for v in value)
    return isinstance(value, dict) and all(_plain(k) and _plain(v) for k, v in value.items())


def _tensor_digest(t: torch.Tensor) -> str:
    if t.device.type == "meta" or t.layout != torch.strided:
        raise _Uncacheable(f"a tensor attribute without readable values ({t.device}, {t.layout})")
    data = t.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
    return hashlib.sha256(data.numpy().tobytes()).hexdigest()


@functools.cache
def _source_digest(cls: type) -> str:
    """sha256 of the file that defines `cls` ("" for torch's own classes,
    which torch's version covers). The whole file: forward may call helpers
    and read constants defined beside the class."""
    if cls.__module__.split(".")[0] == "torch":
        return ""
    try:
        source = inspect.getsource(sys.modules[cls.__module__])
    except (OSError, TypeError, KeyError) as e:
        raise _Uncacheable(f"no source for {cls.__module__}.{cls.__qualname__} ({e})") from None
    return hashlib.sha256(source.encode()).hexdigest()


def _function_digest(fn: Any) -> str:
    try:
        return hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()
    except (OSError, TypeError) as e:
        raise _Uncacheable(f"no source for {getattr(fn, '__qualname__', fn)!r} ({e})") from None


def _token(value: Any) -> Any:
    """A deterministic description of an attribute forward may read."""
    if isinstance(value, _PLAIN):
        return (type(value).__name__, repr(value))
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, [_token(v) for v in value])
    if isinstance(value, dict):
        return ("dict", sorted((repr(k), _token(v)) for k, v in value.items()))
    if isinstance(value, torch.Tensor):
        return (
            "tensor",
            str(value.dtype),
            tuple(value.shape),
            value.stride(),
            str(value.device),
            _tensor_digest(value),
        )
    if isinstance(value, (torch.dtype, torch.device, torch.Size)):
        return repr(value)
    if isinstance(value, (types.FunctionType, types.MethodType)):
        return ("function", _function_digest(value))
    return ("object", type(value).__module__, type(value).__qualname__)


def _module_tokens(model: nn.Module) -> list[Any]:
    out: list[Any] = []
    for qualified, module in model.named_modules(remove_duplicate=False):
        cls = type(module)
        out.append(("module", qualified, cls.__module__, cls.__qualname__))
        out += [_source_digest(c) for c in cls.__mro__ if c is not object]
        for name, value in sorted(vars(module).items()):
            if name.startswith("_") and isinstance(value, (dict, set)):
                if isinstance(value, dict) and "hooks" in name and value:  # hooks change what export traces
                    out.append((name, [_token(h) for h in value.values()]))
                continue  # nn.Module's registries: parameters, buffers and submodules come below
            out.append((name, _token(value)))
    first: dict[int, int] = {}  # tied parameters: which name each shares its tensor with
    for i, (name, t) in enumerate(
        [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]
    ):
        meta = (str(t.dtype), tuple(t.shape), t.stride(), str(t.device), t.requires_grad)
        out.append(("state", name, meta, first.setdefault(id(t), i)))
    return out


def _argument_tokens(args: Sequence[Any]) -> list[Any]:
    leaves, spec = pytree.tree_flatten_with_path(tuple(args))
    out: list[Any] = [str(spec)]
    for path, leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            out.append((pytree.keystr(path), str(leaf.dtype), tuple(leaf.shape), leaf.stride(), str(leaf.device)))
        else:  # capture may bake a non-tensor value into the graph
            out.append((pytree.keystr(path), type(leaf).__name__, repr(leaf)))
    return out


@functools.lru_cache(maxsize=1)
def _code_digest() -> str:
    """sha256 of fuseforge's capture package and of the core extension (the
    op table capture lowers against, the IR parser): a rebuilt fuseforge misses."""
    h = hashlib.sha256()
    files = sorted(Path(inspect.getfile(CapturedGraph)).parent.glob("*.py"))
    for path in [*files, Path(str(core.__file__))]:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def key(model: nn.Module, args: Sequence[Any], precision: str) -> str | None:
    """The entry name for capturing `model(*args)`; None where warm start is
    off or the model cannot be keyed (said once per reason, at debug level)."""
    if _directory() is None:
        return None
    import fuseforge  # at call time: the package imports this module

    devices = {a.device for a in pytree.tree_leaves(tuple(args)) if isinstance(a, torch.Tensor)}
    try:
        parts = [
            FORMAT,
            fuseforge.__version__,
            torch.__version__,
            sys.version_info[:2],
            _code_digest(),
            (model.training, precision, eager_conv_precision(), torch.backends.cudnn.enabled),
            [torch.cuda.get_device_name(d) for d in sorted(devices, key=str) if d.type == "cuda"],
            _argument_tokens(args),
            _module_tokens(model),
        ]
    except Exception as e:  # _Uncacheable, or a model that cannot be described: it is captured, not keyed
        if str(e) not in _said_uncacheable:
            _said_uncacheable.add(str(e))
            log.debug("fuseforge: %s is not kept for warm starts: %s", type(model).__name__, e)
        return None
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _path(k: str | None) -> Path | None:
    directory = _directory()
    return directory / f"{k}.pt" if directory is not None and k is not None else None


def store(k: str | None, captured: CapturedGraph) -> None:
    """Writes `captured` under key `k` (temporary file, then rename); never fails the run."""
    path = _path(k)
    if path is None:
        return
    entry = {
        "format": FORMAT,
        "key": k,
        "text": captured.text,
        "input_bindings": [(b.ir_name, b.kind, b.source) for b in captured.input_bindings],
        "output_names": list(captured.output_names),
        "output_tree": None,
        "mutations": [tuple(m) for m in captured.mutations],
        "constants": {n: t.detach().to("cpu") for n, t in captured.constants.items()},
        "specialized_scalars": dict(captured.specialized_scalars),
        "output_constants": dict(captured.output_constants),
        "opaque_targets": list(captured.opaque_targets),
    }
    try:
        entry["output_tree"] = pytree.treespec_dumps(captured.output_tree)
        if not _plain(entry["specialized_scalars"]) or not _plain(entry["output_constants"]):
            raise _Uncacheable("a baked-in value that is not a plain Python value")
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".graph-")
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(entry, f)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except Exception as e:  # a full disk, a read-only directory, an output tree without a serialized form
        log.debug("fuseforge: captured graph not kept for warm starts: %s: %s", type(e).__name__, e)


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(what)


def _decode(k: str, entry: Any) -> CapturedGraph:
    _check(isinstance(entry, dict) and sorted(entry) == sorted(_FIELDS), "not an entry's fields")
    _check(entry["format"] == FORMAT and entry["key"] == k, "another format or key")
    strings = (entry["text"], *entry["output_names"], *entry["opaque_targets"], *pytree.tree_leaves(entry["mutations"]))
    _check(all(isinstance(s, str) for s in strings), "a name that is not a string")
    _check(all(isinstance(m, tuple) and len(m) == 2 for m in entry["mutations"]), "a malformed mutation")
    bindings = [InputBinding(*b) for b in entry["input_bindings"]]
    constants = entry["constants"]
    _check(all(isinstance(t, torch.Tensor) for t in constants.values()), "a constant that is not a tensor")
    for b in bindings:
        _check(isinstance(b.ir_name, str) and b.kind in _BINDING_KINDS, "a malformed input binding")
        source = (int, str) if b.kind == "user" else int if b.kind == "scalar" else str  # see InputBinding.source
        _check(isinstance(b.source, source), "an input binding with a malformed source")
        _check(b.kind != "const" or b.source in constants, "a constant input without its tensor")
    tree = pytree.treespec_loads(entry["output_tree"])
    outputs = (entry["specialized_scalars"], entry["output_constants"])
    _check(all(isinstance(i, int) for d in outputs for i in d), "a malformed baked-in value")
    leaves = len(entry["output_names"]) + len(entry["output_constants"])
    _check(tree.num_leaves == leaves, "an output tree that does not match the outputs")
    return CapturedGraph(
        text=entry["text"],
        input_bindings=bindings,
        output_names=list(entry["output_names"]),
        output_tree=tree,
        mutations=[tuple(m) for m in entry["mutations"]],
        constants=dict(constants),
        specialized_scalars=dict(entry["specialized_scalars"]),
        output_constants=dict(entry["output_constants"]),
        opaque_targets=list(entry["opaque_targets"]),
    )


def load(k: str | None) -> CapturedGraph | None:
    """The captured graph stored under key `k`; None if there is none, or
    if the entry was unreadable (then it is deleted, with a warning)."""
    path = _path(k)
    if path is None or k is None or not path.is_file():
        return None
    try:
        return _decode(k, torch.load(path, map_location="cpu", weights_only=True))
    except Exception as e:
        discard(k, f"{type(e).__name__}: {e}")
        return None


def discard(k: str | None, reason: str) -> None:
    """Deletes the entry of key `k`, saying why on the `fuseforge` logger."""
    path = _path(k)
    if path is None:
        return
    with contextlib.suppress(OSError):
        path.unlink(missing_ok=True)
    reason = " ".join(reason.split())[:300]
    log.warning("fuseforge: warm-start cache entry %s unreadable (%s); capturing again", path, reason)
