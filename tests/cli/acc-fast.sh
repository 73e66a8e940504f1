#!/bin/bash
# The CPU accumulator (gpu-acc/acc-cpu-fast.c) must write exactly Kaldi's
# bytes. Kaldi's rounding depends on the OpenBLAS kernel its CPU gets, so:
#  1. each OpenBLAS profile, forced with KALDI_GPU_BLAS_PROFILE, SIMD and scalar
#     code (KALDI_GPU_DEV_NO_SIMD=1), against stats stock Kaldi wrote on a CPU of that
#     profile: hsw = tests/data/kaldi/hsw/* (bundle's Kaldi, OpenBLAS 0.3.21
#     Zen core, AMD EPYC); skx = the fixtures' stats (kaldi/mono/final.acc,
#     noisy/mono.acc); tri2 (40 dims) is the same in both;
#  2. with a Kaldi bundle (tests/cli/lib/kaldi-bundle.sh): the profile our
#     programs choose for it on this CPU against the bundle's
#     gmm-acc-stats-ali run now, and tools/acc-blas-check against the
#     bundle's libopenblas (the BLAS arithmetic on random data).
# Env: BIN, TOP, TOOLS. Exit 0 pass, 1 fail.
set -u
: "${BIN:?}" "${TOP:?}"
prog="$BIN/gmm-acc-stats-ali"
if [ ! -x "$prog" ]; then echo "SKIP: $prog not built"; exit 77; fi
cd "$TOP/tests/data" || exit 1
tmp=$(mktemp -d /tmp/acc-fast.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# case NAME MODEL FEATS ALI
cases=(
  "mono models/mono/final.mdl ark:feats/delta.ark ark:kaldi/mono/ali.ark"
  "noisy-mono models/mono/final.mdl ark:noisy/delta.ark ark:noisy/mono.ali.ark"
  "tri2 models/tri2/final.mdl ark:feats/lda.ark ark:kaldi/tri2/ali.ark"
)
want() {  # want PROFILE NAME -> expected stats file
  case "$1/$2" in
    hsw/mono) echo kaldi/hsw/mono.acc ;;
    hsw/noisy-mono) echo kaldi/hsw/noisy-mono.acc ;;
    skx/mono) echo kaldi/mono/final.acc ;;
    skx/noisy-mono) echo noisy/mono.acc ;;
    */tri2) echo kaldi/tri2/final.acc ;;
  esac
}
for prof in hsw skx; do
  for nosimd in 0 1; do
    for c in "${cases[@]}"; do
      set -- $c
      out="$tmp/$1.$prof.$nosimd.acc"
      KALDI_GPU_BLAS_PROFILE=$prof KALDI_GPU_DEV_NO_SIMD=$nosimd "$prog" --use-gpu=no "$2" "$3" "$4" "$out" \
        2>"$tmp/log" || { fail "$1 ($prof, KALDI_GPU_DEV_NO_SIMD=$nosimd): exit $?"; cat "$tmp/log"; continue; }
      cmp -s "$out" "$(want $prof "$1")" ||
        fail "$1 ($prof, KALDI_GPU_DEV_NO_SIMD=$nosimd): bytes differ from $(want $prof "$1")"
    done
  done
done
# The two profiles must really differ on the 39-dim cases (else part 1
# would not test the profile switch).
cmp -s kaldi/hsw/mono.acc kaldi/mono/final.acc && fail "hsw and skx expectations are identical"

# 2. against the bundle, on this CPU, with the profile our programs choose
# for that Kaldi (base/matrix/blas-profile.h).
. "$TOP/tests/cli/lib/kaldi-bundle.sh"
kb=$(find_kaldi_bundle "$tmp")
if [ -n "$kb" ] && [ -x "$kb/bin/gmm-acc-stats-ali" ] && [ -r "$kb/lib/libopenblas.so.0" ]; then
  cases+=("tri1 models/tri1/final.mdl ark:feats/delta.ark ark:kaldi/tri1/ali.ark")
  # dims 4 and 8: SkylakeX's small-m sgemv kernel (tests/cli/small-dim.sh)
  cases+=("mono4 models/mono4/final.mdl ark:feats/delta4.ark ark:kaldi/mono/ali.ark")
  cases+=("mono8 models/mono8/final.mdl ark:feats/delta8.ark ark:kaldi/mono/ali.ark")
  for c in "${cases[@]}"; do
    set -- $c
    LD_LIBRARY_PATH="$kb/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      "$kb/bin/gmm-acc-stats-ali" "$2" "$3" "$4" "$tmp/$1.kaldi.acc" 2>"$tmp/klog" ||
      { fail "$1: Kaldi's gmm-acc-stats-ali failed"; cat "$tmp/klog"; }
  done
  # The profile our programs choose with this Kaldi on PATH: every case,
  # SIMD and scalar, and the BLAS-level check must agree with it.
  line=$(env -u KALDI_GPU_BLAS_PROFILE PATH="$kb/bin:$PATH" "$BIN/kaldi-gpu-service" --print-rounding 2>/dev/null)
  host_profile=""
  case $line in *"	matched	"*) host_profile=${line%%	*} ;; esac
  if [ -z "$host_profile" ]; then
    echo "acc-fast: NOTE: this host's Kaldi ($kb) is not matched ($line); part 2 not run"
  else
    export KALDI_GPU_BLAS_PROFILE=$host_profile
    if [ -x "${TOOLS:-}/acc-blas-check" ]; then
      "$TOOLS/acc-blas-check" "$kb/lib/libopenblas.so.0" || fail "acc-blas-check"
      KALDI_GPU_DEV_NO_SIMD=1 "$TOOLS/acc-blas-check" --trials=500 "$kb/lib/libopenblas.so.0" ||
        fail "acc-blas-check (scalar)"
    else
      fail "tools/acc-blas-check not built"
    fi
    for c in "${cases[@]}"; do
      set -- $c
      for nosimd in 0 1; do
        KALDI_GPU_DEV_NO_SIMD=$nosimd "$prog" --use-gpu=no "$2" "$3" "$4" "$tmp/$1.ours.acc" 2>"$tmp/log" ||
          { fail "$1: exit $?"; continue; }
        cmp -s "$tmp/$1.ours.acc" "$tmp/$1.kaldi.acc" ||
          fail "$1 (KALDI_GPU_DEV_NO_SIMD=$nosimd, profile $host_profile): bytes differ from Kaldi's on this CPU"
      done
    done
    echo "acc-fast: compared with the Kaldi bundle $kb on this CPU (profile $host_profile)"
  fi
else
  echo "acc-fast: no Kaldi bundle (KALDI_BUNDLE): this CPU's own profile not checked against Kaldi"
fi
[ $fails = 0 ] && echo "PASS" && exit 0
echo "$fails failure(s)"
exit 1
