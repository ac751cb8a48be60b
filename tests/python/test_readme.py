"""README.md: short, opening with the two commands a newcomer runs, and its
performance block the one tools/readme_performance.py generates from
benchmarks/results/<gpu>.json."""

import importlib.util
import json
import re

import pytest

from conftest import ROOT

README = ROOT / "README.md"
RESULTS = ROOT / "benchmarks" / "results"
FIRST_COMMANDS = [
    "bash scripts/setup.sh && .venv/bin/fuseforge run benchmarks/problems/seeds/conv2d_min_add_multiply.py",
    "bash scripts/test.sh",
]


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("readme_performance", ROOT / "tools" / "readme_performance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_is_at_most_200_lines():
    assert len(README.read_text().splitlines()) <= 200


def test_readme_opens_with_setup_run_and_tests():
    """The first block, before any section, holds exactly the two commands,
    and the files they name exist."""
    text = README.read_text()
    block = re.search(r"```(?:bash|sh)?\n(.*?)```", text, re.S)
    assert block and "\n## " not in text[: block.start()], "README must open with a command block"
    commands = [line for line in block.group(1).splitlines() if line.strip() and not line.startswith("#")]
    assert commands == FIRST_COMMANDS
    for path in ("scripts/setup.sh", "scripts/test.sh", "benchmarks/problems/seeds/conv2d_min_add_multiply.py"):
        assert (ROOT / path).is_file(), path


def test_readme_performance_block_is_generated_from_the_results(tool):
    diff = tool.check(README, RESULTS)
    assert not diff, "README is stale; run python tools/readme_performance.py\n" + "\n".join(diff)


def test_readme_performance_block_names_every_report(tool):
    block = tool.render(RESULTS)
    for path in sorted(RESULTS.glob("*.json")):
        report = json.loads(path.read_text())
        assert f"[{path.stem}](" in block and report["device"] in block, path


def test_check_names_a_stale_figure_and_the_rewrite_fixes_it(tool, tmp_path, capsys):
    """A report whose geomean changed: --check exits 1 and prints the old and
    new line; without --check the block is rewritten and the rest kept."""
    results = tmp_path / "results"
    results.mkdir()
    report = {
        "device": "NVIDIA Test GPU",
        "torch": "2.11.0",
        "precision": "fp32",
        "date": ["2026-01-02T00:00:00+00:00", "2026-01-03T00:00:00+00:00"],  # a merged report
        "command": ["fuseforge bench a", "fuseforge bench b"],
        "summary": {
            "problems": 3,
            "correct": 2,
            "geomean_speedup_vs_eager": 1.5,
            "fast_1_vs_eager": 2,
            "timed_vs_eager": 3,
        },
        "problems": {},
    }
    (results / "gpu.json").write_text(json.dumps(report))
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n{tool.BEGIN}\nold\n{tool.END}\nafter\n")
    assert tool.main(["--readme", str(readme), "--results", str(results)]) == 0
    text = readme.read_text()
    assert text.startswith("# x\n\nbefore\n") and text.endswith(f"{tool.END}\nafter\n")
    assert "| 2/3 | 1.50× | 2/3 | — | — | 2026-01-03 |" in text
    assert "gpu: `fuseforge bench a && fuseforge bench b`" in text
    assert tool.main(["--readme", str(readme), "--results", str(results), "--check"]) == 0

    report["summary"]["geomean_speedup_vs_eager"] = 1.25
    (results / "gpu.json").write_text(json.dumps(report))
    capsys.readouterr()
    assert tool.main(["--readme", str(readme), "--results", str(results), "--check"]) == 1
    err = capsys.readouterr().err
    assert "1.50×" in err and "1.25×" in err and "performance block differs" in err
    assert readme.read_text() == text  # --check never writes


def test_a_readme_without_the_block_is_an_error(tool, tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("# x\n")
    assert tool.main(["--readme", str(readme), "--results", str(tmp_path), "--check"]) == 2
    assert "performance:begin" in capsys.readouterr().err
