from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = sorted((ROOT / "benchmarks" / "problems").glob("*/*.py"))


def pytest_collection_modifyitems(config, items):
    import torch
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def problems():
    return PROBLEMS
