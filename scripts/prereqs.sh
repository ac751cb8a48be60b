# Prerequisite checks, sourced by setup.sh and test.sh (bash). Each missing
# prerequisite is one line on stderr saying what to install; the functions
# return 1 when anything is missing. Overrides: $PYTHON (the interpreter the
# venv is made from), $CXX (the C++ compiler CMake will use), CUDAToolkit_ROOT.

ff_missing() {  # what, what to do
  echo "fuseforge: missing prerequisite: $1 -- $2" >&2
}

# A throwaway CMake project that runs find_package(...) the way the build does;
# prints FOUND or NOTFOUND. $1: package, $2: project languages.
ff_cmake_finds() {
  local dir rc
  dir=$(mktemp -d)
  cat > "$dir/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.24)
project(ff_prereq_probe LANGUAGES $2)
find_package($1)
if($1_FOUND)
  message(STATUS "ff-probe: FOUND")
endif()
EOF
  cmake -S "$dir" -B "$dir/build" > "$dir/log" 2>&1
  if grep -q "ff-probe: FOUND" "$dir/log"; then echo FOUND; else echo NOTFOUND; fi
  rm -rf "$dir"
}

ff_version_at_least() {  # have, need: dotted versions
  [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]
}

ff_check_python() {
  local py=${PYTHON:-python3} version
  if ! version=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null); then
    ff_missing "Python >= 3.10" "install python3 (3.10 or newer) with its venv module, or set PYTHON=/path/to/python3"
    return 1
  fi
  if ! ff_version_at_least "$version" 3.10; then
    ff_missing "Python >= 3.10 (found $version at $(command -v "$py"))" "install Python 3.10 or newer, or set PYTHON=/path/to/python3.x"
    return 1
  fi
  # Debian and Ubuntu ship venv's pip bootstrap (ensurepip) separately.
  if ! "$py" -c 'import venv, ensurepip' 2>/dev/null; then
    ff_missing "Python's venv module with ensurepip (for $py)" "install python3-venv (Debian/Ubuntu: apt-get install python3-venv or python$version-venv)"
    return 1
  fi
}

ff_check_cxx() {
  local cxx=${CXX:-} candidate
  if [ -z "$cxx" ]; then
    for candidate in c++ g++ clang++; do
      if command -v "$candidate" > /dev/null 2>&1; then cxx=$candidate; break; fi
    done
  fi
  if [ -z "$cxx" ] || ! command -v "$cxx" > /dev/null 2>&1; then
    ff_missing "a C++17 compiler" "install g++ (>= 8) or clang++ (>= 7), e.g. apt-get install g++, or set CXX"
    return 1
  fi
  if ! printf '#include <optional>\nint main() { std::optional<int> v = 0; if constexpr (true) return *v; }\n' |
       "$cxx" -std=c++17 -x c++ - -o /dev/null > /dev/null 2>&1; then
    ff_missing "a C++17 compiler ($cxx cannot compile C++17)" "install g++ (>= 8) or clang++ (>= 7), or set CXX"
    return 1
  fi
}

ff_check_cmake() {
  local version
  if ! command -v cmake > /dev/null 2>&1; then
    ff_missing "CMake >= 3.24" "install it from cmake.org or your package manager, or: python3 -m pip install --user 'cmake>=3.24'"
    return 1
  fi
  version=$(cmake --version 2>/dev/null | sed -n 's/^cmake version \([0-9][0-9.]*\).*/\1/p')
  if [ -z "$version" ] || ! ff_version_at_least "$version" 3.24; then
    ff_missing "CMake >= 3.24 (found ${version:-an unreadable version} at $(command -v cmake))" "install a newer one from cmake.org, or: python3 -m pip install --user 'cmake>=3.24'"
    return 1
  fi
}

# Only CUDA's headers and nvcc's location are needed to build (no GPU): the
# core finds them through CMake's FindCUDAToolkit, so ask it. Needs cmake.
ff_check_cuda_toolkit() {
  if [ "$(ff_cmake_finds CUDAToolkit NONE)" != FOUND ]; then
    ff_missing "the CUDA toolkit (nvcc, cuda.h, nvrtc.h, libcudart, as CMake's find_package(CUDAToolkit) needs)" "install it from developer.nvidia.com/cuda-downloads (12.x or 13.x; no GPU needed to build), or set CUDAToolkit_ROOT to its directory"
    return 1
  fi
}

ff_check_gtest() {
  if [ "$(ff_cmake_finds GTest CXX)" != FOUND ]; then
    ff_missing "GoogleTest (for the C++ tests; CMake's find_package(GTest))" "install libgtest-dev (Debian/Ubuntu), gtest (Fedora, Homebrew), or set GTest_ROOT"
    return 1
  fi
}

# Everything scripts/setup.sh needs; with --tests also what scripts/test.sh
# adds (GoogleTest). Reports every missing prerequisite, not only the first.
ff_check_prereqs() {
  local ok=0
  ff_check_python || ok=1
  ff_check_cxx || ok=1
  if ff_check_cmake; then
    ff_check_cuda_toolkit || ok=1
    if [ "${1:-}" = --tests ]; then ff_check_gtest || ok=1; fi
  else
    ok=1
  fi
  return $ok
}
