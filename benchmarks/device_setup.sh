#!/usr/bin/env bash
# Installs fuseforge on a fresh GPU machine without network access
# (docs/DEVELOPING.md, "GPU runs on a fresh machine"). A default $CXX that
# links libstdc++ statically builds an extension that crashes inside a torch process (two libstdc++ copies share
# iostream locale state): build with the system g++ instead. Pinned nanobind/scikit-build-core and nvidia-cutlass (the
# GEMM kernels' headers; installed here without its Python dependencies) come as wheels in .whl/.
set -euo pipefail
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
CC=gcc CXX=g++ python3 -m pip install -q --no-build-isolation --no-deps . 
