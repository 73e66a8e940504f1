#!/bin/bash
# One device call: GPU tests, the whole suite with a GPU present, a
# compute-sanitizer run and the benchmark, with logs under $OUT.
# Built here beforehand: make all && tools/device-pack.sh; carry build,
# gmmbin-gpu and .carry. Usage (on the GPU machine): tools/gpu-session.sh [what...]
#   what: gpu-tests all-tests sanitize bench demo (default: all of them)
set -uo pipefail
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH="$PWD/.carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
what=${*:-gpu-tests all-tests sanitize demo bench}
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } 2>&1 | tee "$OUT/env.txt"
for w in $what; do
  echo "=== $w ==="
  case $w in
    gpu-tests) KIO_REQUIRE_GPU=1 tests/run-tests.sh --gpu build 2>&1 | tee "$OUT/test-gpu.log" ;;
    all-tests) tests/run-tests.sh build 2>&1 | tee "$OUT/test-all.log" ;;
    sanitize)
      cd tests/data
      compute-sanitizer --tool memcheck --error-exitcode 9 ../../gmmbin-gpu/gmm-align-compiled --use-gpu=yes \
        --transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40 \
        models/mono/final.mdl 'ark:gunzip -c graphs/mono.fsts.gz|' ark:noisy/delta.ark ark:/tmp/san.ali 2>&1 | tail -n 20 | tee "$OUT/sanitize.log"
      echo "compute-sanitizer exit ${PIPESTATUS[0]}" | tee -a "$OUT/sanitize.log"
      cd ../.. ;;
    demo) tools/demo.sh 2>&1 | tee "$OUT/demo.log" ;;
    bench) tools/bench.sh 2>&1 | tee "$OUT/bench.log" ;;
  esac
done
