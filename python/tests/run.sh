#!/bin/bash
# Runs one Python test of the binding (tests/run-tests.sh calls it):
#   python/tests/run.sh BUILD_DIR SCRIPT [ARGS]
# with a python3 that has numpy: $PYTHON, else the first python3 on PATH
# that imports numpy (Debian: python3-numpy, tools/install-deps.sh); the
# library of BUILD_DIR ($KALDI_GPU_LIBRARY) and this tree's package. Exit
# 77 after "SKIP: why" when there is none.
set -u
build=$1; shift
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
case "$build" in /*) ;; *) build=$top/$build ;; esac
py=""
for c in ${PYTHON:-} $(type -ap python3); do
  "$c" -c "import numpy" 2>/dev/null && { py=$c; break; }
done
if [ -z "$py" ]; then
  echo "SKIP: no python3 with numpy (${PYTHON:-python3}: install python3-numpy or set PYTHON)"
  exit 77
fi
if [ "${build##*-san}" != "$build" ]; then
  echo "SKIP: the sanitizer build's shared library needs its runtime preloaded into python"
  exit 77
fi
[ -f "$build/libkaldi-gpu-align.so" ] || { echo "SKIP: $build/libkaldi-gpu-align.so not built"; exit 77; }
export KALDI_GPU_LIBRARY=$build/libkaldi-gpu-align.so
export PYTHONPATH=$top/python${PYTHONPATH:+:$PYTHONPATH}
echo "python: $py"
exec "$py" "$here/$1" "${@:2}"
