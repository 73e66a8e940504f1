#!/bin/bash
# One device call: GPU suites, the whole suite with a GPU present, a
# compute-sanitizer run, kernel timings, the demo and the benchmark; logs
# under $OUT. Prepare here with `make all && tools/device-pack.sh`, then run
# with carry [".carry"]. Usage: tools/gpu-session.sh [step...]
#   steps: gpu-tests all-tests sanitize kernels demo bench (default: all)
set -uo pipefail
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH="$PWD/.carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export BUILD=.carry/build
cp .carry/gmmbin-gpu/* gmmbin-gpu/
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
steps=${*:-gpu-tests all-tests sanitize kernels demo bench}
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc; } 2>&1 | tee "$OUT/env.txt"
for s in $steps; do
  echo "=== $s ($(date -u +%T)) ==="
  case $s in
    gpu-tests) KIO_REQUIRE_GPU=1 tests/run-tests.sh --gpu "$BUILD" 2>&1 | tee "$OUT/test-gpu.log" ;;
    all-tests) tests/run-tests.sh "$BUILD" 2>&1 | tee "$OUT/test-all.log" ;;
    sanitize)
      ( cd tests/data &&
        compute-sanitizer --tool memcheck --error-exitcode 9 ../../gmmbin-gpu/gmm-align-compiled --use-gpu=yes \
          --transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40 \
          models/mono/final.mdl 'ark:gunzip -c graphs/mono.fsts.gz|' ark:noisy/delta.ark ark:/tmp/san.ali 2>&1 | tail -n 8
        echo "gmm-align-compiled under compute-sanitizer: exit ${PIPESTATUS[0]}"
        compute-sanitizer --tool memcheck --error-exitcode 9 ../../gmmbin-gpu/gmm-acc-stats-ali --use-gpu=yes \
          models/tri2/final.mdl ark:feats/lda.ark ark:kaldi/tri2/ali.ark /tmp/san.acc 2>&1 | tail -n 8
        echo "gmm-acc-stats-ali under compute-sanitizer: exit ${PIPESTATUS[0]}" ) | tee "$OUT/sanitize.log" ;;
    kernels) ( cd tests/data && KIO_GPU_BENCH=500 CK_RUN_CASE=bench "../../$BUILD/tests/check_gpu_align" ) 2>&1 | tail -n 30 | tee "$OUT/kernels.log" ;;
    demo) tools/demo.sh 2>&1 | tee "$OUT/demo.log" ;;
    bench) tools/bench.sh 2>&1 | tee "$OUT/bench.log" ;;
  esac
done
echo "=== done ($(date -u +%T)) ==="
