"""Keeping a plan's prepare-section values between calls. `fuseforge emit`
copies `cached_prepare` verbatim into emitted files, which import only torch
and the standard library: its annotations name builtins, or are strings."""

from collections.abc import Callable


def cached_prepare(cache: dict, weights: list, compute: "Callable[[], list]") -> list:
    """compute()'s values, kept in `cache` and computed again only when one of
    `weights` (the parameters, buffers and constants they are computed from)
    is another tensor than last time, holds other storage, or was changed in
    place (its version counter moved: optimizer steps, load_state_dict, copy_)."""
    import weakref

    stamp = [(w._version, w.data_ptr()) for w in weights]
    refs = cache.get("weights")
    if cache.get("stamp") != stamp or refs is None or any(r() is not w for r, w in zip(refs, weights)):
        cache["values"] = compute()
        cache["stamp"] = stamp
        cache["weights"] = [weakref.ref(w) for w in weights]
    return cache["values"]
