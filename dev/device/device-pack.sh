#!/bin/bash
# Stages what a GPU machine needs under .carry/ (git-ignored), built here:
#   .carry/build/tests, .carry/build/tools   test suites and tools (stripped)
#   .carry/gmmbin-gpu                        the programs (stripped)
#   .carry/build/test-bin                    their test builds (test hooks on)
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
  case $f in *.o|*.d) ;; *) [ -x "$f" ] && cp "$f" ".carry/build/tests/$(basename "$(dirname "$f")")/" ;; esac
done
for f in "$build"/tools/*; do case $f in *.o|*.d) ;; *) [ -x "$f" ] && cp "$f" .carry/build/tools/ ;; esac; done
for f in gmmbin-gpu/*; do case $f in *.c|*.h) ;; *) [ -x "$f" ] && cp "$f" .carry/gmmbin-gpu/ ;; esac; done
for f in "$build"/test-bin/*; do case $f in *.o|*.d) ;; *) [ -x "$f" ] && cp "$f" .carry/build/test-bin/ ;; esac; done
strip .carry/build/tests/*/* .carry/build/tools/* .carry/gmmbin-gpu/* .carry/build/test-bin/*
for b in .carry/build/tests/*/* .carry/build/tools/* .carry/gmmbin-gpu/* .carry/build/test-bin/*; do
  ldd "$b" 2>/dev/null | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libstdc++*|libgcc_s*|ld-linux*|libpthread*|libdl.so*|librt.so*) ;;
    libcuda*|libcublas*|libcudart*|libnvidia*) ;;
    *) cp -L "$lib" .carry/lib/ ;;
  esac
done
du -sh .carry/*
