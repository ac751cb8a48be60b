"""The package's layering, read from its source with ast (nothing imported):
the product never imports the benchmark harness, module-level imports form no
cycle, no module imports another's private name, FUSEFORGE_* variables are
read only by runtime/options.py, and docs/ENVIRONMENT.md's table lists every
FUSEFORGE_* name the Python package and the C++ core use; the C++ core's
folders, read from its #include lines, keep their order (kernel/ below
passes/, fusion/ and codegen/; codegen/ below fusion/)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYTHON = ROOT / "python"
PACKAGE = PYTHON / "fuseforge"
HARNESS = "fuseforge.harness"
OPTIONS = "fuseforge.runtime.options"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PYTHON).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}
#: The C++ extension modules (CMakeLists.txt), imported like submodules.
EXTENSIONS = {
    f"fuseforge.{m}"
    for m in re.findall(r"(?:nanobind_add_module|Python_add_library)\(\s*(\w+)", (ROOT / "CMakeLists.txt").read_text())
}


def _absolute(module: str, node: ast.ImportFrom) -> str:
    """The module a `from X import ...` in `module` names, relative imports resolved."""
    if not node.level:
        return node.module or ""
    package = module.split(".")
    if MODULES[module].name != "__init__.py":
        package = package[:-1]
    package = package[: len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


def _imports(module: str, nodes: list[ast.AST]) -> list[tuple[str, str | None, int]]:
    """(module imported, name taken from it or None, line) for each fuseforge
    import among `nodes`; a name that is itself a submodule counts as that
    module, imported whole."""
    out: list[tuple[str, str | None, int]] = []
    for node in nodes:
        if isinstance(node, ast.Import):
            out += [(a.name, None, node.lineno) for a in node.names if a.name.split(".")[0] == "fuseforge"]
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, node)
            if source.split(".")[0] != "fuseforge":
                continue
            for a in node.names:
                sub = f"{source}.{a.name}"
                if sub in MODULES or sub in EXTENSIONS:
                    out.append((sub, None, node.lineno))
                else:
                    out.append((source, a.name, node.lineno))
    return out


def _module_level(tree: ast.Module) -> list[ast.AST]:
    """The import statements that run when the module is imported (or that
    type checkers follow): top-level ones, also inside top-level if/try
    blocks (TYPE_CHECKING included), not inside functions or classes."""
    out: list[ast.AST] = []
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                stack += getattr(node, field, [])
        elif isinstance(node, ast.ExceptHandler):
            stack += node.body
    return out


def test_the_package_is_read():
    assert {"fuseforge", "fuseforge.capture.lowering", OPTIONS, f"{HARNESS}.cli"} <= MODULES.keys()
    assert "fuseforge._core" in EXTENSIONS


def test_product_modules_never_import_the_harness():
    """The harness (benchmarks, the CLI) depends on the product, never the
    other way round: no module outside fuseforge.harness imports it, at
    module level or inside a function."""
    bad = [
        f"{module}:{line} imports {target}"
        for module, tree in TREES.items()
        if not (module == HARNESS or module.startswith(HARNESS + "."))
        for target, _, line in _imports(module, list(ast.walk(tree)))
        if target == HARNESS or target.startswith(HARNESS + ".")
    ]
    assert not bad, "product modules import the benchmark harness:\n" + "\n".join(bad)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_module_level_imports_form_no_cycle():
    """Each module's module-level imports of other fuseforge modules (a
    package's __init__ counts as the package) form a DAG. Imports inside
    functions are the way out where a dependency must point upwards."""
    edges = {
        module: {target for target, _, _ in _imports(module, _module_level(tree)) if target in MODULES} - {module}
        for module, tree in TREES.items()
    }
    cycles = _cycles(edges)
    detail = [" <-> ".join(c) + ": " + "; ".join(f"{m} -> {sorted(edges[m] & set(c))}" for m in c) for c in cycles]
    assert not cycles, "import cycles:\n" + "\n".join(detail)


def test_no_module_imports_another_modules_private_name():
    """`from fuseforge.x import _name` couples a module to another's
    internals: what several modules share is public (extension modules such
    as fuseforge._core are modules, not names)."""
    bad = [
        f"{module}:{line} imports {name} from {source}"
        for module, tree in TREES.items()
        for source, name, line in _imports(module, list(ast.walk(tree)))
        if name is not None and name.startswith("_") and not name.startswith("__")
    ]
    assert not bad, "private names imported across modules:\n" + "\n".join(bad)


# ---- the C++ core's folders

CSRC = ROOT / "csrc"
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def _includes() -> list[tuple[str, str, str]]:
    """(including file relative to csrc, its folder, included path) for every
    `#include "..."` of a csrc file that names a csrc file."""
    out = []
    for path in sorted(p for p in CSRC.rglob("*") if p.suffix in (".h", ".cc")):
        rel = path.relative_to(CSRC).as_posix()
        for target in INCLUDE.findall(path.read_text()):
            if (CSRC / target).is_file():
                out.append((rel, rel.split("/")[0], target))
    return out


INCLUDES = _includes()

#: What each of these folders may include from the others: kernel/ (the
#: groups, kernel specs, tiles and estimates every stage shares) sees only the
#: IR; codegen/ (which writes the code) sees kernel/, never fusion/; fusion/
#: (the schedulers, which decide) calls codegen/; passes/ see kernel/'s
#: coverage tests and estimates, never a scheduler or its cost model.
ALLOWED = {
    "kernel": {"ir"},
    "codegen": {"ir", "kernel"},
    "fusion": {"ir", "kernel", "codegen"},
    "passes": {"ir", "kernel"},
}


def test_the_core_is_read():
    folders = {folder for _, folder, _ in INCLUDES}
    assert set(ALLOWED) <= folders
    assert any(target.startswith("kernel/") for _, folder, target in INCLUDES if folder == "codegen")


def test_core_folders_include_only_the_ones_below():
    bad = [
        f"csrc/{rel} includes {target}"
        for rel, folder, target in INCLUDES
        if folder in ALLOWED and target.split("/")[0] not in ALLOWED[folder] | {folder}
    ]
    assert not bad, f"includes against the folders' order {ALLOWED}:\n" + "\n".join(bad)


def test_fusion_and_codegen_do_not_include_each_other():
    """The direction is fusion/ -> codegen/: a scheduler may call a code
    writer, which sees only the groups and specs in kernel/."""
    back = [
        f"csrc/{rel} includes {target}"
        for rel, folder, target in INCLUDES
        if folder == "codegen" and target.startswith("fusion/")
    ]
    assert not back, "codegen/ includes fusion/ (fusion/ includes codegen/, not the reverse):\n" + "\n".join(back)


def test_no_pass_includes_fusion():
    """Passes decide with kernel/'s coverage tests and estimates (conv.h,
    gemm.h, conv_cost.h, reduction_staging.h), the ones the schedulers use
    too; no pass includes anything under fusion/ (the schedulers and their
    cost models)."""
    bad = [
        f"csrc/{rel} includes {target}"
        for rel, folder, target in INCLUDES
        if folder == "passes" and target.startswith("fusion/")
    ]
    assert not bad, "passes include fusion/:\n" + "\n".join(bad)


def test_core_folders_include_each_other_in_no_cycle():
    """Over every csrc folder (codegen/cuda and codegen/torch count as
    codegen), the includes between folders form a DAG."""
    edges: dict[str, set[str]] = {}
    for _, folder, target in INCLUDES:
        edges.setdefault(folder, set())
        edges.setdefault(target.split("/")[0], set())
        if target.split("/")[0] != folder:
            edges[folder].add(target.split("/")[0])
    cycles = _cycles(edges)
    assert not cycles, "csrc folders that include each other: " + "; ".join(" <-> ".join(c) for c in cycles)


# ---- environment variables

ENV_NAME = re.compile(r"FUSEFORGE_[A-Z0-9_]+")


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the docstring constants of the module, its classes and functions."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _environment_access(node: ast.AST) -> bool:
    """os.environ / os.getenv / os.putenv / os.unsetenv (or the bare names)."""
    names = {"environ", "getenv", "putenv", "unsetenv", "environb", "getenvb"}
    return (isinstance(node, ast.Attribute) and node.attr in names) or (isinstance(node, ast.Name) and node.id in names)


def _env_name(node: ast.AST) -> bool:
    """options' ENV_* constant, by name or as an attribute."""
    return (isinstance(node, ast.Name) and node.id.startswith("ENV_")) or (
        isinstance(node, ast.Attribute) and node.attr.startswith("ENV_")
    )


def _reads_by_env_name(node: ast.AST) -> bool:
    """os.environ.get(ENV_X), os.getenv(ENV_X), os.environ[ENV_X] read, ENV_X in os.environ."""
    if isinstance(node, ast.Call) and node.args and _env_name(node.args[0]):
        f = node.func
        return (isinstance(f, ast.Attribute) and f.attr == "get" and _environment_access(f.value)) or (
            _environment_access(f) and getattr(f, "attr", getattr(f, "id", "")) in ("getenv", "getenvb")
        )
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        return _environment_access(node.value) and _env_name(node.slice)
    if isinstance(node, ast.Compare) and _env_name(node.left):
        return any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) and any(
            _environment_access(c) for c in node.comparators
        )
    return False


def test_fuseforge_variables_are_read_only_in_options():
    """runtime/options.py reads every FUSEFORGE_* variable the Python side
    uses (functions others call) and names them (ENV_* constants, which the
    harness may use to set one for its child processes): elsewhere no code
    (docstrings and comments aside) spells a FUSEFORGE_ name, and none reads
    the environment by an ENV_* name."""
    bad = []
    for module, tree in TREES.items():
        if module == OPTIONS:
            continue
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                found = ENV_NAME.search(node.value)
                if found:
                    bad.append(f"{module}:{node.lineno} spells {found.group(0)}")
            elif isinstance(node, ast.keyword) and node.arg and ENV_NAME.fullmatch(node.arg):
                bad.append(f"{module}:{node.value.lineno} passes {node.arg}=")
            elif _reads_by_env_name(node):
                bad.append(f"{module}:{node.lineno} reads the environment: {ast.unparse(node)}")
    assert not bad, (
        "FUSEFORGE_* variables are read in runtime/options.py only (others call its functions, "
        "and name a variable by its ENV_* constants):\n" + "\n".join(bad)
    )


def _documented_names() -> set[str]:
    """The names in the first column of docs/ENVIRONMENT.md's table."""
    rows = [line for line in (ROOT / "docs" / "ENVIRONMENT.md").read_text().splitlines() if line.startswith("|")]
    names = set()
    for row in rows:
        first = row.strip("|").split("|")[0]
        names.update(ENV_NAME.findall(first))
    return names


def _used_names() -> dict[str, list[str]]:
    """Every FUSEFORGE_* name in python/fuseforge and csrc (code, comments and
    messages alike), with the files it is in."""
    used: dict[str, list[str]] = {}
    files = [*PACKAGE.rglob("*.py"), *(p for p in (ROOT / "csrc").rglob("*") if p.suffix in (".h", ".cc", ".def"))]
    for path in files:
        for name in set(ENV_NAME.findall(path.read_text(errors="replace"))):
            used.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return used


def test_environment_md_lists_every_variable():
    documented, used = _documented_names(), _used_names()
    assert documented, "docs/ENVIRONMENT.md has no table of FUSEFORGE_* variables"
    missing = {name: files for name, files in used.items() if name not in documented}
    assert not missing, f"FUSEFORGE_* names used but not in docs/ENVIRONMENT.md's table: {missing}"
    stale = documented - used.keys()
    assert not stale, f"docs/ENVIRONMENT.md's table lists names nothing in python/fuseforge or csrc uses: {stale}"
