#!/bin/bash
# On an AVX-512 GPU host (one device call, about a minute): our sgemm model
# of OpenBLAS's SkylakeX and Cooperlake cores (base/matrix/blas-gemm.c,
# blas-order.h) against the Kaldi bundle's libopenblas, and what to change
# when it misses:
#   1. the CPU (family/model, AVX-512 flags) and the core each
#      OPENBLAS_CORETYPE really runs (OPENBLAS_VERBOSE=2);
#   2. per core: tools/blas-order-check (every operation, 1-16 threads; its
#      "table" line is the core's GEMM_P/Q/R and unrolls from the library),
#      then --diagnose=600 (sgemm only: per trial with mismatches, which
#      candidate chain or K blocking reproduces OpenBLAS; rows in
#      skx-<core>.diag);
#   3. transform-feats on short utterances (the small-matrix path: M*T <=
#      1200) and the fixture pipelines: Kaldi's pipes against our in-process
#      chains (feat-copy), per core, at OpenBLAS's default threads and at 1;
#   4. tests/cli/rounding.sh for these cores (statistics, alignments,
#      feature chains against the bundle's programs);
#   5. with a GPU: check_gpu_feats (the device feature chains = the CPU
#      chains, skx and cpl on utterances of 1-13 frames among them).
# Needs the tools built (make all; or BUILD=.carry/build and .carry/gmmbin-gpu
# as dev/device/device-pack.sh stages them) and the bundle: $KALDI_BUNDLE
# (unpacked or the .tar.xz), else /tmp/recipe-device/in/kaldi-bin.tar.xz,
# shared/kaldi/ or ../shared/kaldi/kaldi-bin.tar.xz.
# Writes $OUT/skx-gemm.log and $OUT/skx-*.diag (default OUT=/tmp/out). Usage:
#   dev/device/skx-gemm-diagnose.sh [CORE...]   (default: SkylakeX Cooperlake)
set -uo pipefail
cd "$(dirname "$0")/../.."
top=$PWD
export LD_LIBRARY_PATH="$top/.carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BUILD=${BUILD:-build}
tools=$top/$BUILD/tools
bin=$top/gmmbin-gpu
[ -d .carry/gmmbin-gpu ] && [ ! -x "$bin/kaldi-gpu-service" ] && bin=$top/.carry/gmmbin-gpu
cores=${*:-SkylakeX Cooperlake}
tmp=$(mktemp -d /tmp/skx-gemm.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
exec > >(tee "$OUT/skx-gemm.log") 2>&1

kb=${KALDI_BUNDLE:-}
for t in "$kb" /tmp/recipe-device/in/kaldi-bin.tar.xz shared/kaldi/kaldi-bin.tar.xz \
         ../shared/kaldi/kaldi-bin.tar.xz; do
  [ -n "$t" ] || continue
  if [ -d "$t" ] && [ -x "$t/bin/gmm-est" ]; then kb=$(cd "$t" && pwd); break; fi
  if [ -f "$t" ]; then mkdir -p "$tmp/k" && tar -C "$tmp/k" -xJf "$t" && kb=$tmp/k/kb && break; fi
done
[ -n "$kb" ] && [ -x "$kb/bin/gmm-est" ] || { echo "no Kaldi bundle (KALDI_BUNDLE)"; exit 1; }
lib=$kb/lib/libopenblas.so.0
[ -x "$tools/blas-order-check" ] || { echo "no $tools/blas-order-check (make all, or BUILD=.carry/build)"; exit 1; }

echo "=== 1. the CPU ($(date -u '+%F %T UTC'), $(nproc) CPUs)"
awk -F': ' '/^(model name|cpu family|model)[[:space:]]*:/ && !seen[$1]++ {sub(/[[:space:]]+$/, "", $1); printf "%s: %s\n", $1, $2}' /proc/cpuinfo
echo "flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|avx512f|avx512bw|avx512vl|avx512_bf16|amx_tile)$' | tr '\n' ' ')"
for core in $cores; do
  echo "$core: $(OPENBLAS_CORETYPE=$core OPENBLAS_VERBOSE=2 "$kb/bin/gmm-est" 2>&1 | grep -m1 -E 'Core:' | sed 's/^ *//')"
done

fails=0
for core in $cores; do
  echo "=== 2. $core: blas-order-check"
  OPENBLAS_CORETYPE=$core timeout 60 "$tools/blas-order-check" "$lib"; rc=$?
  echo "blas-order-check $core: exit $rc"
  [ $rc = 0 ] || fails=$((fails + 1))
  if [ $rc = 1 ]; then
    echo "--- $core: --diagnose (rows in skx-$core.diag)"
    OPENBLAS_CORETYPE=$core timeout 60 "$tools/blas-order-check" --diagnose=600 "$lib" >"$OUT/skx-$core.diag" 2>&1
    echo "diagnose $core: exit $?"
    grep -E '^(core|profile|table|sgemm|diagnose)' "$OUT/skx-$core.diag"
    sed -n '/^ *th /,$p' "$OUT/skx-$core.diag" | head -40
  fi
done

echo "=== 3. transform-feats, short utterances (the small-matrix path) and the fixtures"
d=$top/tests/data
# every fixture utterance cut to 3..25 frames (M*T = 40*T <= 1200), same keys
awk '{printf "%s %s 0 %.2f\n", $1, $1, (4 + (NR * 7) % 27) / 100}' "$d/featpipe/feats.scp" >"$tmp/segments"
(cd "$d" && "$kb/bin/extract-feature-segments" --min-segment-length=0.01 scp:featpipe/feats.scp "$tmp/segments" "ark:$tmp/short.ark") \
  2>"$tmp/seg.log" || { echo "extract-feature-segments failed: $(tail -1 "$tmp/seg.log")"; fails=$((fails + 1)); }
cmvn="apply-cmvn --utt2spk=ark:featpipe/utt2spk scp:featpipe/cmvn.scp"
lda="splice-feats --left-context=3 --right-context=3 ark:- ark:- | transform-feats featpipe/final.mat ark:- ark:-"
sat="transform-feats --utt2spk=ark:featpipe/utt2spk ark:featpipe/trans.ark ark:- ark:-"
pipes=("short-lda|$cmvn ark:$tmp/short.ark ark:- | $lda" "short-sat|$cmvn ark:$tmp/short.ark ark:- | $lda | $sat"
       "lda|$cmvn scp:featpipe/feats.scp ark:- | $lda" "sat|$cmvn scp:featpipe/feats.scp ark:- | $lda | $sat")
for core in $cores; do
  for th in default 1; do
    for p in "${pipes[@]}"; do
      name=${p%%|*} pipe=${p#*|}
      envs=(OPENBLAS_CORETYPE=$core); [ $th = 1 ] && envs+=(OPENBLAS_NUM_THREADS=1)
      (cd "$d" && env "${envs[@]}" PATH="$kb/bin:$PATH" sh -c "$pipe" >"$tmp/k.ark" 2>"$tmp/k.log") ||
        { echo "FAIL $core $name threads $th: Kaldi's pipe: $(tail -1 "$tmp/k.log")"; fails=$((fails + 1)); continue; }
      (cd "$d" && env -u KALDI_GPU_BLAS_PROFILE "${envs[@]}" PATH="$kb/bin:$PATH" "$tools/feat-copy" \
        "ark:$pipe |" "ark:$tmp/o.ark" 2>"$tmp/o.log") ||
        { echo "FAIL $core $name threads $th: feat-copy: $(tail -1 "$tmp/o.log")"; fails=$((fails + 1)); continue; }
      if cmp -s "$tmp/k.ark" "$tmp/o.ark"; then echo "ok $core $name threads $th"
      else echo "FAIL $core $name threads $th: features differ from Kaldi's"; fails=$((fails + 1)); fi
    done
  done
done

echo "=== 4. tests/cli/rounding.sh for $cores"
if [ -x "$bin/gmm-acc-stats-ali" ]; then
  env -u KALDI_GPU_BLAS_PROFILE ROUNDING_CORES="$cores" KALDI_BUNDLE="$kb" BIN="$bin" TOP="$top" \
    TOOLS="$tools" timeout 120 bash tests/cli/rounding.sh; rc=$?
  echo "rounding.sh: exit $rc"; [ $rc = 0 ] || fails=$((fails + 1))
else
  echo "no programs in $bin: rounding.sh not run"
fi
echo "=== 5. the device feature chains (check_gpu_feats)"
if [ -x "$top/$BUILD/tests/gpu/check_gpu_feats" ] && nvidia-smi -L >/dev/null 2>&1; then
  (cd "$d" && KALDI_GPU_BLAS_PROFILE=skx KIO_REQUIRE_GPU=1 timeout 120 "$top/$BUILD/tests/gpu/check_gpu_feats" 2>&1 | tail -n 3
   exit "${PIPESTATUS[0]}"); rc=$?
  echo "check_gpu_feats: exit $rc"; [ $rc = 0 ] || fails=$((fails + 1))
else
  echo "no GPU or no $BUILD/tests/gpu/check_gpu_feats: not run"
fi
echo "=== skx-gemm-diagnose: $fails failure(s) ($(date -u '+%T UTC'))"
[ $fails = 0 ]
