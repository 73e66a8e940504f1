#!/bin/bash
# gmm-align-compiled with the feature chain computed on the device
# (KALDI_GPU_FEATS_GPU=1, gpu-feats + align-gfeat.c) against the same program with
# the chain on the CPU (KALDI_GPU_FEATS_GPU=0, base/feat/feat-chain.c): alignments,
# scores and per-frame log-likelihoods byte for byte, the same stderr (VLOG
# lines aside: they say which path ran and its times): the same lines, the
# program's own in the same order, the feature programs' command lines and
# final LOG lines in the same order (their warnings may come at other
# times), the exit status; on a recipe-like data directory
# made from the fixtures (tools/gfeat-testdata: compressed 13-dim input,
# per-speaker CMVN, per-speaker fMLLR-like transforms): deltas (tri1),
# LDA+MLLT (tri2) with the skx profile and with hsw at 2 OpenBLAS threads,
# LDA+MLLT + per-speaker transforms (SAT's chain), a speaker without CMVN stats,
# small batches, long utterances on the host decoder (KALDI_GPU_DEV_LONG_FRAMES),
# a feats.scp with utterances the graphs do not cover (the feature programs
# count them too), copy-feats and CVN, a transform-feats that does nothing
# (its exit status 1 fails the pipe: exit 255);
# a chain the device does not run (select-feats): the CPU chain, VLOG line.
# Own context only (KALDI_GPU_SERVICE=no). Env: BIN, TOP, TOOLS; GFEAT_EMU=1
# (tests/emu/run.sh): BIN is the emulator's build, no GPU probe. Exit 0
# pass, 1 fail, 77 skip (no GPU, unless KIO_REQUIRE_GPU=1).
set -u
: "${BIN:?}" "${TOP:?}" "${TOOLS:?}"
BIN=$(cd "$BIN" && pwd) || exit 1
TOOLS=$(cd "$TOOLS" && pwd) || exit 1
prog="$BIN/gmm-align-compiled"
prep="$TOOLS/gfeat-testdata"
for x in "$prog" "$prep"; do
  if [ ! -x "$x" ]; then echo "SKIP: $x not built"; exit 77; fi
done
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/gpu-feats-cli.XXXXXX)
trap '[ -n "${GFEAT_KEEP:-}" ] || rm -rf "$tmp"' EXIT
cd "$TOP/tests/data" || exit 1
export KALDI_GPU_SERVICE=no
unset KALDI_GPU_FEATS_PIPE

if [ "${GFEAT_EMU:-0}" != 1 ]; then
  . "$here/lib/gpu-probe.sh"
  gpu_probe_align "$prog" "$tmp"
fi

fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
mkdir -p "$tmp/d" "$tmp/dm"
"$prep" --fmllr=40 ark:feats/delta.ark "$tmp/d" 2>/dev/null || { echo "FAIL: gfeat-testdata"; exit 1; }
"$prep" --drop-last-speaker ark:feats/delta.ark "$tmp/dm" 2>/dev/null || { echo "FAIL: gfeat-testdata"; exit 1; }
# x: dm with an utterance the graphs lack after each one (same matrix and
# speaker): the pipe's programs process them, the aligner never asks.
mkdir -p "$tmp/x"
cp "$tmp/dm/cmvn.scp" "$tmp/x/" && cp "$tmp/d/trans.ark" "$tmp/x/trans.ark" || exit 1
awk '{print; $1 = $1 "x"; print}' "$tmp/dm/feats.scp" >"$tmp/x/feats.scp"
awk '{print; $1 = $1 "x"; print}' "$tmp/dm/utt2spk" >"$tmp/x/utt2spk"
nx=$(wc -l <"$tmp/x/feats.scp")

# A run's stderr without VLOG lines and an ERROR's stack trace (addresses),
# its own file names made the same.
lines() {
  grep -v -E '^(VLOG\[|\[ Stack-Trace: \]$|/.*\([^)]*\+0x[0-9a-f]+\) \[0x[0-9a-f]+\]$)' "$1" |
    sed -e "s|$tmp/$2\.[01]\.|$tmp/$2.G.|g"
}
# The program's own lines, in order.
own() { grep -E '^(LOG|WARNING|ERROR) \(gmm-align-compiled'; }
# The other lines but warnings: command lines and the feature programs' final
# LOG lines, in order.
chain() { grep -v -E '^(LOG|WARNING|ERROR) \(gmm-align-compiled' | grep -v -E '^WARNING'; }
# Where the device path prints them: the command lines before the program's
# first own line (after the line naming the program ours), the final LOG
# lines before its summary.
placed() {
  awk 'BEGIN { bad = 0 }
       /^(LOG|WARNING|ERROR) \(gmm-align-compiled/ && !/:kio_log_ours\(\)/ { own++ }
       /Overall log-likelihood per frame/ { summary = 1 }
       NR > 1 && NF > 0 && !/^(LOG|WARNING|ERROR|VLOG)/ && own > 0 { bad = 1 }
       /^LOG \((apply-cmvn|transform-feats|copy-feats)/ && summary { bad = 1 }
       END { exit bad }'

}

n=0
# name; model; data dir; apply-cmvn options; the chain after it; env; options
while IFS=';' read -r name model dd cmvnopt rest envs opts; do
  [ -z "$name" ] && continue
  n=$((n + 1))
  feats="ark,s,cs:apply-cmvn $cmvnopt --utt2spk=ark:$tmp/$dd/utt2spk scp:$tmp/$dd/cmvn.scp scp:$tmp/$dd/feats.scp ark:- |$rest"
  for g in 0 1; do
    # shellcheck disable=SC2086
    env $envs KALDI_GPU_FEATS_GPU=$g "$prog" --verbose=1 --use-gpu=yes --transition-scale=1.0 \
      --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40 $opts \
      --write-per-frame-acoustic-loglikes="ark:$tmp/$name.$g.pf" models/$model/final.mdl \
      "ark:gunzip -c graphs/$model.fsts.gz|" "$feats" "ark:$tmp/$name.$g.ali" \
      "ark,t:$tmp/$name.$g.scores" >"$tmp/$name.$g.log" 2>&1
    echo $? >"$tmp/$name.$g.rc"
  done
  want=0
  [ "${name#fail-}" != "$name" ] && want=255
  [ "${name#nodec-}" != "$name" ] && want=1  # no utterance aligned
  [ "$(cat "$tmp/$name.0.rc")" = $want ] || fail "$name: exit $(cat "$tmp/$name.0.rc") with the CPU chain, expected $want"
  [ "$(cat "$tmp/$name.1.rc")" = "$(cat "$tmp/$name.0.rc")" ] ||
    fail "$name: exit $(cat "$tmp/$name.1.rc") with KALDI_GPU_FEATS_GPU=1, $(cat "$tmp/$name.0.rc") without"
  grep -q "Features computed on the GPU" "$tmp/$name.0.log" && fail "$name: GPU features with KALDI_GPU_FEATS_GPU=0"
  if [ "${name#cpu-}" != "$name" ]; then  # not for the device: the CPU chain, with a VLOG line
    grep -q "Features not computed on the GPU" "$tmp/$name.1.log" ||
      fail "$name: no 'Features not computed on the GPU' line"
    grep -q "Feature pipeline computed in-process" "$tmp/$name.1.log" ||
      fail "$name: the CPU chain did not run"
  elif [ $want = 0 ]; then
    grep -q "Features computed on the GPU" "$tmp/$name.1.log" ||
      fail "$name: features not computed on the GPU: $(grep -m1 'Features not computed' "$tmp/$name.1.log")"
    grep -q -E "likelihoods of [1-9][0-9]* utterances read them on the device" "$tmp/$name.1.log" ||
      fail "$name: the likelihoods did not read the device features"
  fi
  for x in ali scores pf; do
    [ -e "$tmp/$name.0.$x" ] || [ -e "$tmp/$name.1.$x" ] || continue
    cmp -s "$tmp/$name.0.$x" "$tmp/$name.1.$x" || fail "$name: $x differs with KALDI_GPU_FEATS_GPU=1"
  done
  [ $want = 0 ] && { [ -s "$tmp/$name.1.ali" ] || fail "$name: no alignments"; }
  for f in sort own chain; do
    if ! diff <(lines "$tmp/$name.0.log" "$name" | $f) <(lines "$tmp/$name.1.log" "$name" | $f) \
         >"$tmp/$name.diff"; then
      fail "$name: stderr differs ($f; < CPU chain, > device chain):"; head -20 "$tmp/$name.diff" | sed 's/^/    /'
    fi
  done
  grep -q -E '^LOG \(apply-cmvn.*Applied cepstral mean' "$tmp/$name.1.log" ||
    fail "$name: no apply-cmvn final LOG line"
  lines "$tmp/$name.1.log" "$name" | placed || fail "$name: the feature programs' lines out of place with KALDI_GPU_FEATS_GPU=1"
done <<EOF
delta;tri1;d;; add-deltas ark:- ark:- |;;
delta-b7-long;tri1;d;; add-deltas ark:- ark:- |;KALDI_GPU_DEV_LONG_FRAMES=400;--batch-size=7
lda-b7-long;tri2;d;; splice-feats --left-context=3 --right-context=3 ark:- ark:- | transform-feats models/tri2/final.mat ark:- ark:- |;KALDI_GPU_DEV_LONG_FRAMES=300;--batch-size=7
nospk;tri1;dm;; add-deltas ark:- ark:- |;;--batch-size=5
cpu-select;tri1;d;; select-feats 0-12 ark:- ark:- | add-deltas ark:- ark:- |;;
lda;tri2;d;; splice-feats --left-context=3 --right-context=3 ark:- ark:- | transform-feats models/tri2/final.mat ark:- ark:- |;;
lda-hsw2;tri2;d;; splice-feats --left-context=3 --right-context=3 ark:- ark:- | transform-feats models/tri2/final.mat ark:- ark:- |;KALDI_GPU_BLAS_PROFILE=hsw KALDI_GPU_DEV_FEATS_BLAS_THREADS=2;--batch-size=9
sat;tri2;d;; splice-feats --left-context=3 --right-context=3 ark:- ark:- | transform-feats models/tri2/final.mat ark:- ark:- | transform-feats --utt2spk=ark:$tmp/d/utt2spk ark:$tmp/d/trans.ark ark:- ark:- |;;--batch-size=10
extra;tri1;x;; add-deltas ark:- ark:- |;;--batch-size=7
sat-extra;tri2;x;; splice-feats --left-context=3 --right-context=3 ark:- ark:- | transform-feats models/tri2/final.mat ark:- ark:- | transform-feats --utt2spk=ark:$tmp/x/utt2spk ark:$tmp/x/trans.ark ark:- ark:- |;;
copy;tri1;d;; add-deltas ark:- ark:- | copy-feats ark:- ark:- |;;--batch-size=9
nodec-cvn;tri1;d;--norm-vars=true; add-deltas ark:- ark:- |;;
fail-notrans;tri2;d;; splice-feats --left-context=3 --right-context=3 ark:- ark:- | transform-feats models/tri2/final.mat ark:- ark:- | transform-feats --utt2spk=ark:$tmp/d/utt2spk ark:/dev/null ark:- ark:- |;;
sat-hsw2-long;tri2;d;; splice-feats --left-context=3 --right-context=3 ark:- ark:- | transform-feats models/tri2/final.mat ark:- ark:- | transform-feats --utt2spk=ark:$tmp/d/utt2spk ark:$tmp/d/trans.ark ark:- ark:- |;KALDI_GPU_BLAS_PROFILE=hsw KALDI_GPU_DEV_FEATS_BLAS_THREADS=2 KALDI_GPU_DEV_LONG_FRAMES=400;
EOF
[ $n -eq 14 ] || fail "only $n cases run"
grep -q "No normalization statistics" "$tmp/nospk.1.log" || fail "nospk: no apply-cmvn warning on the GPU path"
for c in extra sat-extra; do  # done + errors: every utterance of feats.scp
  t=$(sed -n -E 's/.*Applied cepstral mean normalization to ([0-9]+) utterances, errors on ([0-9]+)$/\1 + \2/p' \
      "$tmp/$c.1.log")
  [ -n "$t" ] && [ $((t)) -eq "$nx" ] || fail "$c: apply-cmvn counted $t, not the $nx utterances of feats.scp"
done
grep -q "Copied 40 feature matrices" "$tmp/copy.1.log" || fail "copy: no copy-feats count"
grep -q "Applied cepstral mean and variance normalization to 40" "$tmp/nodec-cvn.1.log" ||
  fail "nodec-cvn: no CVN count"
grep -q "Applied transform to 0 utterances; 40 had errors" "$tmp/fail-notrans.1.log" &&
  grep -q "input pipe failed" "$tmp/fail-notrans.1.log" || fail "fail-notrans: no failed pipe"
if [ $fails -eq 0 ]; then echo "gpu-feats: $n cases identical with KALDI_GPU_FEATS_GPU=1"; exit 0; fi
exit 1
