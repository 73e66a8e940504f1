#!/bin/bash
# Long recordings in bounded memory (issue 11), CPU path: one 2.4-minute
# utterance (tests/data/long, one speaker's utterances concatenated, graph
# compiled by Kaldi) aligned byte-identically to Kaldi's gmm-align-compiled
#  - as is (likelihoods kept one frame at a time: T x pdfs is over the
#    cache limit);
#  - with the token arena's garbage collection running at every frame and
#    the likelihood cache off for the 40 fixture utterances too
#    (KALDI_GPU_TEST_CPU_TOK_START=16 KALDI_GPU_TEST_CPU_LL_CACHE=1; noisy tri1 includes
#    retries and failures): outputs byte-identical to the default run;
#  - in margin mode with Kaldi's alignment as the prior (identical);
#  - with USE_GPU=yes, on the chunked device path (host decoder, device
#    likelihoods in frame chunks): the long utterance identical to Kaldi,
#    and every noisy fixture utterance forced through it with 100-frame
#    chunks (retries, failures) identical to --use-gpu=no: alignments,
#    scores, log lines. Without a GPU (USE_GPU=no) that part prints SKIP.
# Memory and time are measured by dev/oracles/long-utterance.sh and
# dev/bench/margin-bench.sh, not here. Env: TEST_BIN, TOP, USE_GPU (default no).
set -u
: "${TEST_BIN:?}" "${TOP:?}"
# The programs built with the test hooks on (the arena and cache limits).
BIN=$(cd "$TEST_BIN" && pwd) || exit 1
USE_GPU=${USE_GPU:-no}
[ -x "$BIN/gmm-align-compiled" ] || { echo "SKIP: gmm-align-compiled not built"; exit 77; }
cd "$TOP/tests/data" || exit 1
export PATH="$BIN:$PATH"
tmp=$(mktemp -d /tmp/long-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
opts="--use-gpu=$USE_GPU --transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40"
lg="ark:gunzip -c long/graph.fsts.gz|"

gmm-align-compiled $opts models/tri1/final.mdl "$lg" ark:long/feats.ark "ark,t:$tmp/long.ali" \
  2>"$tmp/long.log" || fail "long: exit $?"
cmp -s "$tmp/long.ali" long/kaldi.ali || fail "long: alignment differs from Kaldi's"
grep -q 'Overall log-likelihood per frame is -82.46.. over 14158 frames' "$tmp/long.log" ||
  fail "long: $(grep Overall "$tmp/long.log")"
KALDI_GPU_TEST_CPU_TOK_START=16 KALDI_GPU_TEST_CPU_LL_CACHE=1 gmm-align-compiled $opts models/tri1/final.mdl \
  "$lg" ark:long/feats.ark "ark,t:$tmp/long-gc.ali" 2>"$tmp/long-gc.log" || fail "long gc: exit $?"
cmp -s "$tmp/long-gc.ali" long/kaldi.ali || fail "long gc: alignment differs from Kaldi's"
gmm-align-compiled $opts --prior-alignments=ark,t:long/kaldi.ali --margin=64 \
  models/tri1/final.mdl "$lg" ark:long/feats.ark "ark,t:$tmp/long-m.ali" 2>"$tmp/long-m.log" ||
  fail "long margin: exit $?"
cmp -s "$tmp/long-m.ali" long/kaldi.ali || fail "long margin: alignment differs from Kaldi's"
grep -q 'Margin 64: 1 of 1 utterances aligned inside the band' "$tmp/long-m.log" ||
  fail "long margin: not banded"

for m in mono tri1; do
  g="ark:gunzip -c graphs/$m.fsts.gz|"
  gmm-align-compiled $opts models/$m/final.mdl "$g" ark:noisy/delta.ark "ark:$tmp/$m.ark" \
    "ark,t:$tmp/$m.scores" 2>"$tmp/$m.log"
  KALDI_GPU_TEST_CPU_TOK_START=16 KALDI_GPU_TEST_CPU_LL_CACHE=1 gmm-align-compiled $opts models/$m/final.mdl \
    "$g" ark:noisy/delta.ark "ark:$tmp/$m-gc.ark" "ark,t:$tmp/$m-gc.scores" 2>"$tmp/$m-gc.log"
  cmp -s "$tmp/$m.ark" "$tmp/$m-gc.ark" || fail "noisy $m: gc changes the alignments"
  cmp -s "$tmp/$m.scores" "$tmp/$m-gc.scores" || fail "noisy $m: gc changes the scores"
  diff <(grep -v '^gmm-align' "$tmp/$m.log") <(grep -v '^gmm-align' "$tmp/$m-gc.log") >/dev/null ||
    fail "noisy $m: gc changes the log"
done

# The chunked device path (not with KALDI_GPU_DEV_LIKELIHOODS=gemm: it needs the exact
# likelihood kernel, and long utterances then take the CPU path). On the
# job's own context: through the GPU service the thresholds below would be
# the service's (its environment) and its log lines stay in its own log.
if [ "$USE_GPU" = yes ] && [ "${KALDI_GPU_DEV_LIKELIHOODS:-}" != gemm ]; then
  KALDI_GPU_SERVICE=no KALDI_GPU_DEV_LONG_FRAMES=6000 KALDI_GPU_DEV_CHUNK_FRAMES=1000 gmm-align-compiled --verbose=1 $opts \
    models/tri1/final.mdl "$lg" ark:long/feats.ark "ark,t:$tmp/long-ch.ali" 2>"$tmp/long-ch.log" ||
    fail "long chunked: exit $?"
  cmp -s "$tmp/long-ch.ali" long/kaldi.ali || fail "long chunked: alignment differs from Kaldi's"
  grep -q 'Long utterances: 1 (14158 frames) decoded with device likelihoods in chunks' \
    "$tmp/long-ch.log" || fail "long chunked: not on the chunked path"
  for m in mono tri1; do
    g="ark:gunzip -c graphs/$m.fsts.gz|"
    gmm-align-compiled ${opts/--use-gpu=yes/--use-gpu=no} models/$m/final.mdl "$g" \
      ark:noisy/delta.ark "ark:$tmp/$m-cpu.ark" "ark,t:$tmp/$m-cpu.scores" 2>"$tmp/$m-cpu.log"
    KALDI_GPU_SERVICE=no KALDI_GPU_DEV_LONG_FRAMES=1 KALDI_GPU_DEV_CHUNK_FRAMES=100 gmm-align-compiled $opts \
      models/$m/final.mdl "$g" ark:noisy/delta.ark "ark:$tmp/$m-ch.ark" \
      "ark,t:$tmp/$m-ch.scores" 2>"$tmp/$m-ch.log"
    cmp -s "$tmp/$m-cpu.ark" "$tmp/$m-ch.ark" || fail "noisy $m: chunked path changes the alignments"
    cmp -s "$tmp/$m-cpu.scores" "$tmp/$m-ch.scores" || fail "noisy $m: chunked path changes the scores"
    diff <(grep -v '^gmm-align\|galign_aligner_new' "$tmp/$m-cpu.log") \
      <(grep -v '^gmm-align\|galign_aligner_new' "$tmp/$m-ch.log") >/dev/null ||
      fail "noisy $m: chunked path changes the log"
  done
  echo "chunked device path: long utterance and noisy fixtures identical"
else
  echo "SKIP: chunked device path (USE_GPU=$USE_GPU${KALDI_GPU_DEV_LIKELIHOODS:+, KALDI_GPU_DEV_LIKELIHOODS=$KALDI_GPU_DEV_LIKELIHOODS})"
fi

if [ $fails -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "all long-utterance checks passed (use-gpu=$USE_GPU)"
