"""GEMM kernel plans on the CPU: opt-in switch, epilogue fusion, and the ATen
fallback a GEMM step takes on the GPU for misaligned views or a kernel that
did not compile."""
import torch

from fuseforge._native import core
from fuseforge.capture import capture
from fuseforge.executor import Executor


class Linear(torch.nn.Module):
    def __init__(self, beta: float = 1.0, epilogue: bool = False):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(6, 12))
        self.bias = torch.nn.Parameter(torch.randn(6))
        self.beta = beta
        self.epilogue = epilogue

    def forward(self, x):
        y = torch.addmm(self.bias, x, self.weight.t(), beta=self.beta)
        return torch.sigmoid(y) * 2.0 + y if self.epilogue else y


def _plan(model, x, gemm):
    return core.compile_graph(capture(model, [x], name="linear").text, gemm=gemm)


def test_gemm_kernels_are_opt_in(monkeypatch):
    torch.manual_seed(0)
    x = torch.randn(5, 12)
    monkeypatch.delenv("FUSEFORGE_GEMM", raising=False)
    assert not [k for k in core.compile_graph(capture(Linear(), [x], name="l").text)["kernels"] if k["kind"] == "gemm"]
    monkeypatch.setenv("FUSEFORGE_GEMM", "1")
    assert [k for k in core.compile_graph(capture(Linear(), [x], name="l").text)["kernels"] if k["kind"] == "gemm"]


def test_fallback_reviews_kernel_inputs_and_matches_aten():
    """On the GPU a transposed weight reaches the kernel as the weight itself
    (the view is never run); the fallback re-views it with the captured strides."""
    torch.manual_seed(0)
    x = torch.randn(5, 12)
    for beta, epilogue in ((1.0, False), (0.0, False), (0.5, True)):
        model = Linear(beta, epilogue)
        plan = _plan(model, x, gemm=True)
        (k,) = [k for k in plan["kernels"] if k["kind"] == "gemm"]
        assert len(k["nodes"]) == (4 if epilogue else 1) and len(plan["kernels"]) == 1
        assert len(k["inputs"]) == 3  # x, weight.T, bias (passed even when beta = 0)
        executor = Executor(plan, torch.device("cpu"))
        roots = {"x": x, "weight": model.weight.detach(), "bias": model.bias.detach()}
        # Each kernel input is a graph input or a view of one; pass the graph input.
        ins = []
        for name in k["inputs"]:
            if name in roots:
                ins.append(roots[name])
            else:
                (view,) = [s for s in plan["steps"] if s["kind"] == "node" and s["results"] == [name]]
                ins.append(roots[view["operands"][0][1]])
        (out,) = executor._gemm_fallback(k)(ins)
        torch.testing.assert_close(out, model(x).detach())
