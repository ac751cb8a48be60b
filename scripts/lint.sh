#!/usr/bin/env bash
# Lint and types, before anything builds (scripts/test.sh runs it first):
# ruff's lint and format over the Python package, tests and tools; the core's
# stub (python/fuseforge/_core.pyi) against the installed extension; mypy over
# python/fuseforge; clang-format over csrc. The tools are the pinned ones in
# .venv (requirements.txt; settings in pyproject.toml and .clang-format).
# Usage: bash scripts/lint.sh
# Runs every check; each failure ends with one line naming the tool and the
# fix. Exit status 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."

BIN=.venv/bin
PY_PATHS=(python tests/python tools)
failed=0
fail() {  # tool, what to do
  echo "fuseforge lint: $1 failed -- $2" >&2
  failed=1
}

for tool in python ruff mypy clang-format; do
  if [ ! -x "$BIN/$tool" ]; then
    echo "fuseforge lint: $BIN/$tool is missing -- run bash scripts/setup.sh (it installs requirements.txt)" >&2
    exit 1
  fi
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$BIN/ruff" check --quiet "${PY_PATHS[@]}" ||
  fail "ruff check" "fix the lines above (.venv/bin/ruff check --fix ${PY_PATHS[*]} fixes those marked fixable)"

"$BIN/ruff" format --check --quiet "${PY_PATHS[@]}" ||
  fail "ruff format" "run .venv/bin/ruff format ${PY_PATHS[*]}"

# The stub mypy reads for the C++ extension must say what the built one binds.
STUBGEN=("$BIN/python" -m nanobind.stubgen -q -p scripts/core_stub.patterns -m fuseforge._core)
if ! "${STUBGEN[@]}" -o "$tmp/_core.pyi" > "$tmp/stubgen.log" 2>&1; then
  tail -n 5 "$tmp/stubgen.log" >&2
  fail "nanobind stubgen" "fuseforge._core does not import from .venv: run bash scripts/setup.sh"
elif ! diff -u python/fuseforge/_core.pyi "$tmp/_core.pyi" > "$tmp/stub.diff"; then
  head -n 40 "$tmp/stub.diff" >&2
  fail "the _core.pyi check" "python/fuseforge/_core.pyi is not the installed extension's: after rebuilding it (docs/DEVELOPING.md), run ${STUBGEN[*]} -o python/fuseforge/_core.pyi"
fi

"$BIN/mypy" ||
  fail "mypy" "annotate or fix the lines above (settings: [tool.mypy] in pyproject.toml)"

mapfile -d '' CXX_FILES < <(find csrc \( -name '*.cc' -o -name '*.h' \) -print0 | sort -z)
if ! "$BIN/clang-format" --dry-run --Werror "${CXX_FILES[@]}" 2> "$tmp/clang-format.log"; then
  grep -m 10 -E '^[^ ]+:[0-9]+:[0-9]+: error' "$tmp/clang-format.log" >&2
  unformatted=$(sed -n -E 's/^([^ ]+):[0-9]+:[0-9]+: error.*/\1/p' "$tmp/clang-format.log" | sort -u | paste -sd ' ')
  fail "clang-format" "run .venv/bin/clang-format -i ${unformatted:-<the files above>}"
fi

exit $failed
