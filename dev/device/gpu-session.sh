#!/bin/bash
# One device call: GPU suites, the whole suite with a GPU present, a
# compute-sanitizer run, kernel timings, the demo and the benchmark; logs
# under $OUT. Prepare here with `make all && dev/device/device-pack.sh`, then run
# with carry [".carry"]. Usage: dev/device/gpu-session.sh [step...]
#   steps: gpu-tests all-tests sanitize feats kernels demo bench service rounding
#   (default: all but rounding)
#   feats: the feature chains on the device (issue 8, gpu-feats): its suite,
#   gmm-align-compiled KALDI_GPU_FEATS_GPU=1 vs 0 (cli/gpu-feats.sh), the device
#   chain under compute-sanitizer, timings (dev/bench/gfeat-bench.sh, FEATS_COPIES)
#   service: the GPU service's failures with a GPU: the fault tests
#   (the jobs fall back to contexts of their own), the identity's cost
#   (cuInit + UUIDs, no context: one job, then 16 at once; per visible GPU),
#   a real broken context (a trapping kernel) found and the service restarted
#   rounding: dev/device/rounding-device.sh (the core the Kaldi bundle's OpenBLAS
#   picks here and why, our automatic choice, our outputs against that Kaldi per
#   core); needs the bundle (KALDI_BUNDLE, or recipe-device.sh's stash); not in
#   the default steps
set -uo pipefail
cd "$(dirname "$0")/../.."
export LD_LIBRARY_PATH="$PWD/.carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export BUILD=.carry/build
cp .carry/gmmbin-gpu/* gmmbin-gpu/
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
steps=${*:-gpu-tests all-tests sanitize feats kernels demo bench service}
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc; } 2>&1 | tee "$OUT/env.txt"
for s in $steps; do
  echo "=== $s ($(date -u +%T)) ==="
  case $s in
    gpu-tests) KIO_REQUIRE_GPU=1 tests/run-tests.sh --gpu "$BUILD" 2>&1 | tee "$OUT/test-gpu.log" ;;
    all-tests) tests/run-tests.sh "$BUILD" 2>&1 | tee "$OUT/test-all.log" ;;
    sanitize)
      # The programs on their own CUDA context, then the GPU service itself
      # under compute-sanitizer (started through KALDI_GPU_SERVICE_BIN).
      ( cd tests/data &&
        export KALDI_GPU_SERVICE=no
        compute-sanitizer --tool memcheck --error-exitcode 9 ../../gmmbin-gpu/gmm-align-compiled --use-gpu=yes \
          --transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40 \
          models/mono/final.mdl 'ark:gunzip -c graphs/mono.fsts.gz|' ark:noisy/delta.ark ark:/tmp/san.ali 2>&1 | tee -a "$OUT/sanitize-full.log" | tail -n 8
        echo "gmm-align-compiled under compute-sanitizer: exit ${PIPESTATUS[0]}"
        compute-sanitizer --tool memcheck --error-exitcode 9 ../../gmmbin-gpu/gmm-acc-stats-ali --use-gpu=yes \
          models/tri2/final.mdl ark:feats/lda.ark ark:kaldi/tri2/ali.ark /tmp/san.acc 2>&1 | tee -a "$OUT/sanitize-full.log" | tail -n 8
        echo "gmm-acc-stats-ali under compute-sanitizer: exit ${PIPESTATUS[0]}"
        # Long utterances: the chunked device likelihoods (every utterance
        # over 300 frames, chunks of 256 frames), noisy data (retries).
        KALDI_GPU_DEV_LONG_FRAMES=300 KALDI_GPU_DEV_CHUNK_FRAMES=256 \
        compute-sanitizer --tool memcheck --error-exitcode 9 ../../gmmbin-gpu/gmm-align-compiled --use-gpu=yes \
          --transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40 \
          models/tri1/final.mdl 'ark:gunzip -c graphs/tri1.fsts.gz|' ark:noisy/delta.ark ark:/tmp/san-long.ali 2>&1 | tee -a "$OUT/sanitize-full.log" | tail -n 8
        echo "gmm-align-compiled (chunked long-utterance path) under compute-sanitizer: exit ${PIPESTATUS[0]}"
        unset KALDI_GPU_SERVICE
        svcdir=$(mktemp -d /tmp/san-svc.XXXXXX); chmod 700 "$svcdir"
        printf '#!/bin/sh\nexec compute-sanitizer --tool memcheck --log-file %s/memcheck.log %s "$@"\n' \
          "$svcdir" "$PWD/../../gmmbin-gpu/kaldi-gpu-service" > "$svcdir/wrap.sh"; chmod +x "$svcdir/wrap.sh"
        export KALDI_GPU_SERVICE_DIR=$svcdir/run KALDI_GPU_SERVICE_BIN=$svcdir/wrap.sh KALDI_GPU_SERVICE_IDLE=3
        ../../gmmbin-gpu/gmm-align-compiled --use-gpu=yes \
          --transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40 models/mono/final.mdl \
          'ark:gunzip -c graphs/mono.fsts.gz|' ark:noisy/delta.ark ark:/tmp/san2.ali 2>&1 | grep -E 'Using GPU|not usable|Done'
        ../../gmmbin-gpu/gmm-acc-stats-ali --use-gpu=yes models/tri2/final.mdl ark:feats/lda.ark \
          ark:kaldi/tri2/ali.ark /tmp/san2.acc 2>&1 | grep -E 'Accumulating on|not usable|Done'
        cmp /tmp/san.ali /tmp/san2.ali && cmp /tmp/san.acc /tmp/san2.acc && echo "service outputs = own-context outputs"
        for _ in $(seq 1 60); do pgrep -f "$svcdir/wrap.sh|kaldi-gpu-service" >/dev/null || break; sleep 1; done
        echo "kaldi-gpu-service under compute-sanitizer: $(grep -h 'ERROR SUMMARY' "$svcdir"/memcheck.log)" ) | tee "$OUT/sanitize.log" ;;
    feats)
      top=$PWD
      ( cd tests/data &&
        KIO_REQUIRE_GPU=1 "$top/$BUILD/tests/gpu/check_gpu_feats" 2>&1 | tail -n 5
        echo "check_gpu_feats: exit ${PIPESTATUS[0]}"
        KIO_REQUIRE_GPU=1 BIN="$top/gmmbin-gpu" TOP="$top" TOOLS="$top/$BUILD/tools" bash "$top/tests/cli/gpu-feats.sh"
        echo "cli/gpu-feats.sh (KALDI_GPU_FEATS_GPU=1 vs 0): exit $?"
        d=$(mktemp -d /tmp/san-feats.XXXXXX)
        "$top/$BUILD/tools/gfeat-testdata" --fmllr=40 ark:feats/delta.ark "$d" 2>/dev/null
        lda="splice-feats --left-context=3 --right-context=3 ark:- ark:- | transform-feats models/tri2/final.mat ark:- ark:-"
        for c in delta lda sat; do
          case $c in
            delta) m=tri1; rest="add-deltas ark:- ark:- |" ;;
            lda) m=tri2; rest="$lda |" ;;
            sat) m=tri2; rest="$lda | transform-feats --utt2spk=ark:$d/utt2spk ark:$d/trans.ark ark:- ark:- |" ;;
          esac
          KALDI_GPU_SERVICE=no KALDI_GPU_FEATS_GPU=1 KALDI_GPU_DEV_LONG_FRAMES=300 \
          compute-sanitizer --tool memcheck --error-exitcode 9 ../../gmmbin-gpu/gmm-align-compiled --verbose=1 \
            --use-gpu=yes --transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 \
            --retry-beam=40 --batch-size=9 models/$m/final.mdl "ark:gunzip -c graphs/$m.fsts.gz|" \
            "ark,s,cs:apply-cmvn --utt2spk=ark:$d/utt2spk scp:$d/cmvn.scp scp:$d/feats.scp ark:- | $rest" \
            ark:/tmp/san-feats.ali 2>&1 | grep -E 'Features computed|ERROR|SUMMARY|Done' | tail -n 8
          echo "gmm-align-compiled $m, $c chain, KALDI_GPU_FEATS_GPU=1, under compute-sanitizer: exit ${PIPESTATUS[0]}"
        done
        rm -rf "$d" ) 2>&1 | tee "$OUT/feats.log"
      COPIES=${FEATS_COPIES:-255} WORK=/tmp/gfeat-bench dev/bench/gfeat-bench.sh "$BUILD" 2>&1 | tee "$OUT/feats-bench.log" ;;
    service) dev/device/service-faults.sh "$BUILD" 2>&1 | tee "$OUT/service.log" ;;
    kernels) ( cd tests/data && KIO_GPU_BENCH=500 CK_RUN_CASE=bench "../../$BUILD/tests/gpu/check_gpu_align" ) 2>&1 | tail -n 30 | tee "$OUT/kernels.log" ;;
    demo) tools/demo.sh 2>&1 | tee "$OUT/demo.log" ;;
    rounding) OUT=$OUT BUILD=$BUILD dev/device/rounding-device.sh ;;
    bench) dev/bench/bench.sh 2>&1 | tee "$OUT/bench.log" ;;
  esac
done
echo "=== done ($(date -u +%T)) ==="
