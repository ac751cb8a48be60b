"""scripts/lint.sh: every check runs, each failure ends with one line naming
the tool and the fix, and the exit status says whether any failed. Runs the
script on a scratch tree whose .venv/bin tools are fakes told to pass or fail."""

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")

FAKES = {
    # ruff check|format ...: fails when FAIL_RUFF_<CHECK|FORMAT> is set
    "ruff": 'case "$1" in check) [ -z "${FAIL_RUFF_CHECK:-}" ];; *) [ -z "${FAIL_RUFF_FORMAT:-}" ];; esac',
    "mypy": '[ -z "${FAIL_MYPY:-}" ]',
    # clang-format --dry-run --Werror FILES: flags the first file when FAIL_CLANG_FORMAT is set
    "clang-format": '[ -z "${FAIL_CLANG_FORMAT:-}" ] && exit 0\n'
    'echo "$3:1:5: error: code should be clang-formatted [-Wclang-format-violations]" >&2; exit 1',
    # python -m nanobind.stubgen ... -o FILE: writes $STUB (default: the committed stub's text)
    "python": 'while [ $# -gt 1 ]; do [ "$1" = -o ] && printf "%s" "${STUB:-stub}" > "$2"; shift; done',
}


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "lint.sh", tmp_path / "scripts" / "lint.sh")
    (tmp_path / "python" / "fuseforge").mkdir(parents=True)
    (tmp_path / "python" / "fuseforge" / "_core.pyi").write_text("stub")
    (tmp_path / "csrc" / "ir").mkdir(parents=True)
    (tmp_path / "csrc" / "ir" / "op.cc").write_text("int f();\n")
    (tmp_path / "csrc" / "ir" / "op.h").write_text("int f();\n")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name, body in FAKES.items():
        f = bin_dir / name
        f.write_text("#!/bin/sh\n" + body + "\n")
        f.chmod(f.stat().st_mode | stat.S_IEXEC)
    return tmp_path


def lint(tree, **env):
    run_env = {k: v for k, v in os.environ.items() if not k.startswith(("FAIL_", "STUB"))}
    run_env.update(env)
    r = subprocess.run(
        ["bash", str(tree / "scripts" / "lint.sh")], env=run_env, capture_output=True, text=True, timeout=60
    )
    return r, [ln for ln in r.stderr.splitlines() if ln.startswith("fuseforge lint:")]


def test_all_checks_pass(tree):
    r, lines = lint(tree)
    assert r.returncode == 0, r.stderr
    assert lines == []


def test_each_failure_is_one_line_naming_the_tool_and_the_fix(tree):
    r, lines = lint(tree, FAIL_RUFF_CHECK="1", FAIL_RUFF_FORMAT="1", FAIL_MYPY="1", FAIL_CLANG_FORMAT="1")
    assert r.returncode == 1
    assert lines == [
        "fuseforge lint: ruff check failed -- fix the lines above "
        "(.venv/bin/ruff check --fix python tests/python tools fixes those marked fixable)",
        "fuseforge lint: ruff format failed -- run .venv/bin/ruff format python tests/python tools",
        "fuseforge lint: mypy failed -- annotate or fix the lines above (settings: [tool.mypy] in pyproject.toml)",
        "fuseforge lint: clang-format failed -- run .venv/bin/clang-format -i csrc/ir/op.cc",
    ]


def test_a_stale_core_stub_says_how_to_regenerate_it(tree):
    r, lines = lint(tree, STUB="def added() -> None: ...\n")
    assert r.returncode == 1
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("fuseforge lint: the _core.pyi check failed -- python/fuseforge/_core.pyi")
    assert "nanobind.stubgen" in lines[0] and "-o python/fuseforge/_core.pyi" in lines[0]
    assert "+def added() -> None: ..." in r.stderr  # the difference is shown


def test_a_missing_tool_says_to_run_setup(tree):
    (tree / ".venv" / "bin" / "mypy").unlink()
    r, lines = lint(tree)
    assert r.returncode == 1
    assert lines == [
        "fuseforge lint: .venv/bin/mypy is missing -- run bash scripts/setup.sh (it installs requirements.txt)"
    ]
