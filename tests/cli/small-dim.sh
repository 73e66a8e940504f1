#!/bin/bash
# Models of feature dimension 4 and 8. On AVX-512 cores, Kaldi's OpenBLAS
# (0.3.21, core SkylakeX) computes their log-likelihoods in a kernel of its
# own (rows of <= 8 floats with lda == dim; Kaldi's row stride is the dim
# rounded up to 4, so dims 4 and 8), whose order base/matrix/sgemv-skx-small.h
# reproduces. Fixtures (tests/data/README.md): models/mono{4,8} = the mono
# model cut to its first 4/8 dims, feats/delta{4,8}.ark = the same dims of
# the first 20 utterances, kaldi/mono{4,8}/ = what the Kaldi bundle wrote
# on an AVX-512 host (Sapphire Rapids, core SkylakeX): gmm-acc-stats-ali
# stats over kaldi/mono/ali.ark, gmm-align-compiled alignments and scores.
# Our skx profile (the default), SIMD and scalar (KALDI_GPU_DEV_NO_SIMD=1), must give
# the same bytes: gmm-acc-stats-ali, gmm-align-compiled and
# gmm-align-acc-compiled. And the hsw profile (no small-m kernel: AMD/AVX2
# hosts' OpenBLAS) must not, else these fixtures would not test that kernel.
# Env: BIN, TOP; optional USE_GPU (--use-gpu value, default no). Exit 0
# pass, 1 fail, 77 skip.
set -u
: "${BIN:?}" "${TOP:?}"
BIN=$(cd "$BIN" && pwd) || exit 1
for p in gmm-acc-stats-ali gmm-align-compiled gmm-align-acc-compiled; do
  if [ ! -x "$BIN/$p" ]; then echo "SKIP: $BIN/$p not built"; exit 77; fi
done
cd "$TOP/tests/data" || exit 1
tmp=$(mktemp -d /tmp/small-dim.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
gpu="--use-gpu=${USE_GPU:-no}"
export KALDI_GPU_BLAS_PROFILE=skx  # the fixtures' host's (SkylakeX kernels)
ali_opts="--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40 --careful=false"
graphs="ark:gunzip -c graphs/mono.fsts.gz|"

for D in 4 8; do
  mdl=models/mono$D/final.mdl feats=ark:feats/delta$D.ark want=kaldi/mono$D
  for nosimd in 0 1; do
    what="dim $D, KALDI_GPU_DEV_NO_SIMD=$nosimd, $gpu"
    KALDI_GPU_DEV_NO_SIMD=$nosimd "$BIN/gmm-acc-stats-ali" $gpu $mdl $feats ark:kaldi/mono/ali.ark \
      "$tmp/acc" 2>"$tmp/log" || { fail "gmm-acc-stats-ali ($what): exit $?"; cat "$tmp/log"; }
    cmp -s "$tmp/acc" $want/final.acc || fail "gmm-acc-stats-ali ($what): stats differ from Kaldi's"
    KALDI_GPU_DEV_NO_SIMD=$nosimd "$BIN/gmm-align-compiled" $gpu $ali_opts $mdl "$graphs" $feats \
      "ark:$tmp/ali" "ark,t:$tmp/scores" 2>"$tmp/log" ||
      { fail "gmm-align-compiled ($what): exit $?"; cat "$tmp/log"; }
    cmp -s "$tmp/ali" $want/ali.ark || fail "gmm-align-compiled ($what): alignments differ from Kaldi's"
    cmp -s "$tmp/scores" $want/scores.txt || fail "gmm-align-compiled ($what): scores differ from Kaldi's"
    KALDI_GPU_DEV_NO_SIMD=$nosimd "$BIN/gmm-align-acc-compiled" $gpu $ali_opts $mdl "$graphs" $feats \
      "ark:$tmp/ali2" "$tmp/acc2" 2>"$tmp/log" ||
      { fail "gmm-align-acc-compiled ($what): exit $?"; cat "$tmp/log"; }
    cmp -s "$tmp/ali2" $want/ali.ark || fail "gmm-align-acc-compiled ($what): alignments differ from Kaldi's"
    # its stats are over its own alignment (= Kaldi's, checked above), not kaldi/mono/ali.ark
    KALDI_GPU_DEV_NO_SIMD=$nosimd "$BIN/gmm-acc-stats-ali" $gpu $mdl $feats "ark:$want/ali.ark" "$tmp/acc3" \
      2>/dev/null && cmp -s "$tmp/acc2" "$tmp/acc3" ||
      fail "gmm-align-acc-compiled ($what): stats differ from gmm-acc-stats-ali's on the same alignment"
  done
  # The hsw profile rounds as an AVX2 host's Kaldi (the 4x4/4x2/4x1 kernels):
  # these dims must tell it apart.
  KALDI_GPU_BLAS_PROFILE=hsw "$BIN/gmm-acc-stats-ali" $gpu $mdl $feats ark:kaldi/mono/ali.ark "$tmp/hsw.acc" \
    2>/dev/null || fail "gmm-acc-stats-ali (dim $D, hsw): exit $?"
  cmp -s "$tmp/hsw.acc" $want/final.acc && fail "dim $D: the hsw profile gives the skx stats (fixture tests nothing)"
done
[ $fails = 0 ] && echo "PASS" && exit 0
echo "$fails failure(s)"
exit 1
