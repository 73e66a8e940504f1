#!/bin/bash
# Prepares .carry/lib for a run on a GPU machine that lacks this machine's
# libraries (OpenFst, subunit): copies the non-system shared libraries our
# binaries link, never libc/libm/libstdc++/libgcc or the CUDA libraries (the
# GPU host has its own CUDA 13). Usage: tools/device-pack.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
mkdir -p .carry/lib
bins=$(ls gmmbin-gpu/* "$build"/tests/check_* "$build"/tools/* 2>/dev/null | grep -v '\.[ch]$' || true)
for b in $bins; do
  [ -x "$b" ] || continue
  ldd "$b" 2>/dev/null | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libstdc++*|libgcc_s*|ld-linux*|libpthread*|libdl.so*|librt.so*) ;;
    libcuda*|libcublas*|libcudart*|libnvidia*) ;;
    *) cp -L "$lib" .carry/lib/ ;;
  esac
done
ls -la .carry/lib
du -sh .carry
