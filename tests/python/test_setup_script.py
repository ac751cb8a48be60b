"""scripts/prereqs.sh (sourced by setup.sh and test.sh): one line per missing
prerequisite, saying what to install; silence and success when all are there.
scripts/setup.sh: a line per step with its seconds, and on a failure the step,
its first error line and the log's path."""

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def path_without(tmp_path, *hidden):
    """A PATH with every command of the current one except `hidden`, and a
    first directory for fake commands. Directories holding a hidden command
    are replaced by links to their other commands; the others stay as they are
    (CMake finds the CUDA toolkit from nvcc's real directory)."""
    fakes = tmp_path / "fake"
    fakes.mkdir()
    dirs = [str(fakes)]
    for i, d in enumerate(os.environ["PATH"].split(os.pathsep)):
        if not os.path.isdir(d):
            continue
        if not any(os.path.exists(os.path.join(d, h)) for h in hidden):
            dirs.append(d)
            continue
        farm = tmp_path / f"path{i}"
        farm.mkdir()
        for name in os.listdir(d):
            if name not in hidden:
                (farm / name).symlink_to(os.path.join(d, name))
        dirs.append(str(farm))
    return os.pathsep.join(dirs)


def fake_command(path, name, script):
    f = Path(path.split(os.pathsep)[0]) / name
    f.write_text("#!/bin/sh\n" + script + "\n")
    f.chmod(f.stat().st_mode | stat.S_IEXEC)


def check(path, function="ff_check_prereqs", **env):
    run_env = {k: v for k, v in os.environ.items() if k not in ("CXX", "PYTHON")}
    run_env.update(PATH=path, **env)
    return subprocess.run(
        ["bash", "-c", f"source scripts/prereqs.sh && {function}"],
        cwd=ROOT,
        env=run_env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def missing_lines(result):
    return [ln for ln in result.stderr.splitlines() if ln.strip()]


def test_all_prerequisites_present(tmp_path):
    if shutil.which("cmake") is None or shutil.which("python3") is None:
        pytest.skip("this machine lacks a prerequisite itself")
    r = check(path_without(tmp_path), "ff_check_prereqs --tests")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""


def test_missing_cmake_is_one_line_saying_what_to_install(tmp_path):
    r = check(path_without(tmp_path, "cmake"))
    assert r.returncode != 0
    lines = missing_lines(r)
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("fuseforge: missing prerequisite: CMake >= 3.24 -- install")
    assert "cmake.org" in lines[0]


def test_old_cmake_names_the_version_found(tmp_path):
    bin_dir = path_without(tmp_path)
    fake_command(bin_dir, "cmake", 'echo "cmake version 3.20.6"')
    lines = missing_lines(check(bin_dir, "ff_check_cmake"))
    assert len(lines) == 1
    assert "CMake >= 3.24 (found 3.20.6 at " in lines[0]


def test_old_python_and_missing_compiler_are_each_reported(tmp_path):
    bin_dir = path_without(tmp_path, "c++", "g++", "clang++")
    fake_command(bin_dir, "oldpython", "echo 3.8")
    r = check(bin_dir, PYTHON="oldpython")
    lines = missing_lines(r)
    assert r.returncode != 0
    assert len(lines) == 2, r.stderr
    assert "Python >= 3.10 (found 3.8 at " in lines[0] and "PYTHON=" in lines[0]
    assert "a C++17 compiler -- install g++" in lines[1]


def test_compiler_without_cxx17_is_reported(tmp_path):
    bin_dir = path_without(tmp_path)
    fake_command(bin_dir, "oldcxx", "exit 1")  # compiles nothing
    lines = missing_lines(check(bin_dir, "ff_check_cxx", CXX="oldcxx"))
    assert lines == [
        "fuseforge: missing prerequisite: a C++17 compiler (oldcxx cannot compile C++17) -- "
        "install g++ (>= 8) or clang++ (>= 7), or set CXX"
    ]


def fake_checkout(tmp_path, python_script):
    """A copy of setup.sh and prereqs.sh in an empty tree whose .venv/bin/python
    is `python_script` (sh): the script's steps run without installing anything."""
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    for name in ("setup.sh", "prereqs.sh"):
        (root / "scripts" / name).write_text((ROOT / "scripts" / name).read_text())
    (root / ".venv" / "bin").mkdir(parents=True)
    fake_command(str(root / ".venv" / "bin"), "python", python_script)
    return root


def run_setup(root):
    env = {k: v for k, v in os.environ.items() if k not in ("CXX", "PYTHON")}
    return subprocess.run(
        ["bash", str(root / "scripts" / "setup.sh")], env=env, capture_output=True, text=True, timeout=300
    )


FAKE_PIP = """
echo "$*" >> "$(dirname "$0")/../../calls.log"
case "$*" in
  *"--upgrade pip"*) sleep 1 ;;
  *requirements.txt*) [ -n "$FAIL" ] && { echo "Collecting torch"; echo "ERROR: No matching distribution found for torch==0.0"; exit 1; } ;;
  *"import fuseforge"*) echo 0.1.0 ;;
esac
exit 0
"""


def test_setup_prints_each_step_and_its_seconds(tmp_path):
    if shutil.which("cmake") is None:
        pytest.skip("this machine lacks a prerequisite itself")
    root = fake_checkout(tmp_path, FAKE_PIP.replace("$FAIL", ""))
    r = run_setup(root)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    steps = [re.fullmatch(r"fuseforge setup: (.+) \.\.\. (\d+) s", ln) for ln in lines[:-1]]
    assert all(steps), lines
    assert [m.group(1) for m in steps] == [
        "checking the prerequisites",
        "upgrading pip",
        "installing the pinned dependencies (requirements.txt)",
        "building the C++ core and the extension",
    ]
    assert int(steps[1].group(2)) >= 1  # the step's own duration (the fake pip sleeps 1 s)
    assert lines[-1] == "fuseforge installed in .venv (0.1.0)"
    assert r.stderr == ""


def test_a_failed_step_says_so_with_its_first_error_and_the_log(tmp_path):
    if shutil.which("cmake") is None:
        pytest.skip("this machine lacks a prerequisite itself")
    root = fake_checkout(tmp_path, FAKE_PIP.replace("$FAIL", "yes"))
    r = run_setup(root)
    assert r.returncode == 1
    # bash's SECONDS counts whole-second ticks, so even an instant step may read 1 s
    assert re.fullmatch(
        r"fuseforge setup: installing the pinned dependencies \(requirements\.txt\) \.\.\. failed after [01] s",
        r.stdout.splitlines()[-1],
    )
    assert r.stderr.splitlines() == [
        "fuseforge: installing the pinned dependencies (requirements.txt) failed: "
        "ERROR: No matching distribution found for torch==0.0",
        "fuseforge: the full log is build/setup.log",
    ]
    assert "Collecting torch" in (root / "build" / "setup.log").read_text()
    assert "--no-build-isolation" not in (root / "calls.log").read_text()  # nothing ran after the failure
