"""Executor plan handling that needs no GPU: which view steps kernels read
through, and the library calls steps make."""
import pytest
import torch

from fuseforge.runtime.executor import _kernel_only_views, _value_types


def _plan(steps, kernels, values, outputs):
    return {"steps": steps, "kernels": kernels, "values": values, "outputs": outputs, "mutations": [], "inputs": ["x"]}


def _view(op, src, res):
    return {"kind": "node", "op": op, "operands": [("value", src)], "results": [res]}


VALUES = {
    "x": ("f32", [4, 8], [8, 1]),
    "v": ("f32", [1, 4, 8], [32, 8, 1]),        # view of x (contiguous)
    "p": ("f32", [8, 1, 4], [1, 32, 8]),        # permute of v
    "t": ("f32", [8, 4], [1, 8]),               # permute of x
    "r": ("f32", [32], [1]),                    # view of t: a reshape that copies
    "k": ("f32", [8, 1, 4], [4, 4, 1]),
    "m": ("f32", [8, 4], [4, 1]),
}


def test_views_only_kernels_read_are_skipped_through_chains():
    plan = _plan([_view("view", "x", "v"), _view("permute", "v", "p"), {"kind": "kernel", "kernel": 0}],
                 [{"inputs": ["p"], "outputs": ["k"]}], VALUES, ["k"])
    assert _kernel_only_views(plan, _value_types(plan)) == {"v": "x", "p": "x"}


def test_views_that_escape_feed_a_library_op_or_may_copy_run():
    steps = [_view("permute", "x", "t"), _view("view", "t", "r"),
             {"kind": "node", "op": "mm", "operands": [("value", "t"), ("value", "x")], "results": ["m"]},
             _view("view", "x", "v"), {"kind": "kernel", "kernel": 0}]
    plan = _plan(steps, [{"inputs": ["r", "v"], "outputs": ["k"]}], VALUES, ["k", "v"])
    # t feeds mm, r is a copying reshape of a transposed value, v is an output.
    assert _kernel_only_views(plan, _value_types(plan)) == {}


def test_library_calls_take_numbers_where_torch_needs_tensors():
    """maximum/minimum need tensors: a literal or a scalar input (a Python
    number at run time, a rank-0 value in the plan) is wrapped as a 0-d tensor;
    an op with no torch form is a clear error."""
    from fuseforge.runtime import library_calls
    values = {"x": ("f32", [3], [1]), "s": ("f32", [], [])}
    step = {"op": "maximum", "attrs": {}, "result_types": [("f32", [3], [1])],
            "operands": [("value", "x"), ("literal", 0.5)]}
    x = torch.tensor([0.0, 1.0, -2.0])
    torch.testing.assert_close(library_calls.make_call(step, values, torch.device("cpu"))([x, 0.5]),
                               torch.tensor([0.5, 1.0, 0.5]))
    step["operands"] = [("value", "s"), ("value", "x")]
    step["op"] = "minimum"
    torch.testing.assert_close(library_calls.make_call(step, values, torch.device("cpu"))([0.25, x]),
                               torch.tensor([0.0, 0.25, -2.0]))
    with pytest.raises(library_calls.NoLibraryCall, match="no library call for IR op 'fancy'"):
        library_calls.make_call({**step, "op": "fancy"}, values, torch.device("cpu"))
