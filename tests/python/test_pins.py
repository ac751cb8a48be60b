"""requirements.txt and pyproject.toml pin the same versions.

scripts/setup.sh installs requirements.txt, while `pip install .` resolves
pyproject's dependencies: if the two disagree, the second gets other versions
than the ones the tests ran against.
"""

import re
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!-]+)$")


def normalize(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_pins(specs, where):
    """{name: version} of `name==version` specs; anything else is a failure."""
    pins = {}
    for spec in specs:
        m = PIN.match(spec.replace(" ", ""))
        assert m, f"{where}: '{spec}' is not an exact pin (name==version)"
        name = normalize(m.group(1))
        assert name not in pins, f"{where}: {name} is pinned twice"
        pins[name] = m.group(2)
    return pins


def requirements_pins(path):
    lines = [ln.split("#", 1)[0].strip() for ln in path.read_text().splitlines()]
    return parse_pins([ln for ln in lines if ln], path.name)


def pyproject_pins(path):
    data = tomllib.loads(path.read_text())
    specs = list(data["build-system"]["requires"]) + list(data["project"]["dependencies"])
    for extra in data["project"].get("optional-dependencies", {}).values():
        specs += extra
    return parse_pins(specs, path.name)


def test_pyproject_pins_equal_requirements_txt():
    req = requirements_pins(ROOT / "requirements.txt")
    proj = pyproject_pins(ROOT / "pyproject.toml")
    assert proj == req, (
        "pyproject.toml and requirements.txt disagree: "
        f"only in requirements.txt {sorted(set(req.items()) - set(proj.items()))}, "
        f"only in pyproject.toml {sorted(set(proj.items()) - set(req.items()))}"
    )


def test_run_dependencies_are_pinned_exactly(tmp_path):
    # The comparison itself must catch a loosened pin, not just a missing one.
    text = (ROOT / "pyproject.toml").read_text()
    loose = tmp_path / "pyproject.toml"
    loose.write_text(re.sub(r'"torch==[^"]+"', '"torch>=2.9"', text))
    try:
        pyproject_pins(loose)
    except AssertionError as e:
        assert "torch>=2.9" in str(e)
    else:
        raise AssertionError("a loose torch pin was accepted")
    shifted = tmp_path / "requirements.txt"
    shifted.write_text((ROOT / "requirements.txt").read_text().replace("rich==", "rich==0.0.0+"))
    assert requirements_pins(shifted) != pyproject_pins(ROOT / "pyproject.toml")


def test_license_is_declared():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert data["project"]["license"] == "BSD-3-Clause"
    license_text = (ROOT / data["project"]["license-files"][0]).read_text()
    assert license_text.startswith("BSD 3-Clause License")
    assert "the fuseforge authors" in license_text
