#!/bin/bash
# Stages what a GPU machine needs under .carry/ (git-ignored), built here:
#   .carry/build/tests, .carry/build/tools   test suites and tools (stripped)
#   .carry/gmmbin-gpu                        the programs (stripped)
#   .carry/build/test-bin                    their test builds (test hooks on)
#   .carry/build/libkaldi-gpu-align.so       the public library (Python binding)
#   .carry/lib                               non-system shared libraries they
#       link (OpenFst, subunit), never libc/libm/libstdc++/libgcc or CUDA's
#       (the GPU host has its own CUDA 13)
# Then: device run with carry [".carry"] and dev/device/gpu-session.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
rm -rf .carry/build .carry/gmmbin-gpu .carry/lib
mkdir -p .carry/build/tests/unit .carry/build/tests/parity .carry/build/tests/gpu .carry/build/tools .carry/gmmbin-gpu .carry/lib \
  .carry/build/test-bin
for f in "$build"/tests/*/check_*; do
  [ "${PACK_NUMPY:-0}" = 1 ] && break  # no room for both (below)
  case $f in *.o|*.d) ;; *) [ -x "$f" ] && cp "$f" ".carry/build/tests/$(basename "$(dirname "$f")")/" ;; esac
done
for f in "$build"/tools/*; do case $f in *.o|*.d) ;; *) [ -x "$f" ] && cp "$f" .carry/build/tools/ ;; esac; done
for f in gmmbin-gpu/*; do case $f in *.c|*.h) ;; *) [ -x "$f" ] && cp "$f" .carry/gmmbin-gpu/ ;; esac; done
for f in "$build"/test-bin/*; do
  [ "${PACK_NUMPY:-0}" = 1 ] && break
  case $f in *.o|*.d) ;; *) [ -x "$f" ] && cp "$f" .carry/build/test-bin/ ;; esac
done
cp "$build/libkaldi-gpu-align.so" .carry/build/  # the Python binding's library
strip .carry/build/tests/*/* .carry/build/tools/* .carry/gmmbin-gpu/* .carry/build/test-bin/* \
  .carry/build/*.so 2>/dev/null || true
for b in .carry/build/tests/*/* .carry/build/tools/* .carry/gmmbin-gpu/* .carry/build/test-bin/*; do
  ldd "$b" 2>/dev/null | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libstdc++*|libgcc_s*|ld-linux*|libpthread*|libdl.so*|librt.so*) ;;
    libcuda*|libcublas*|libcudart*|libnvidia*) ;;
    *) cp -L "$lib" .carry/lib/ ;;
  esac
done
# PACK_NUMPY=1: this machine's numpy (what `import numpy` needs) and the
# libraries it links, for a GPU host whose python3 has none (same Python
# minor version), instead of the check suites and the test builds (the
# carry holds 64 MiB): for dev/device/python-bench.sh.
rm -rf .carry/py
if [ "${PACK_NUMPY:-0}" = 1 ]; then
  np=$(python3 -c "import numpy, os; print(os.path.dirname(numpy.__file__))" 2>/dev/null ||
       /usr/bin/python3 -c "import numpy, os; print(os.path.dirname(numpy.__file__))")
  mkdir -p .carry/py
  tar -C "$(dirname "$np")" --exclude=tests --exclude=f2py --exclude=distutils --exclude=doc \
    --exclude=_typing --exclude=typing --exclude='*.pyi' --exclude=array_api -cf - numpy |
    tar -C .carry/py -xf -
  find .carry/py -name "*.so" -exec ldd {} + 2>/dev/null | awk '/=> \//{print $3}' | sort -u |
    while read -r lib; do
      case "$(basename "$lib")" in libc.so*|libm.so*|libgcc_s*|ld-linux*|libpthread*) ;; *) cp -L "$lib" .carry/lib/ ;; esac
    done
fi
du -sh .carry/*
