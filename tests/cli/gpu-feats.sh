#!/bin/bash
# gmm-align-compiled with the feature chain computed on the device
# (KIO_FEATS_GPU=1, gpu-feats + align-gfeat.c) against the same program with
# the chain on the CPU (KIO_FEATS_GPU=0, base/feat-chain.c): alignments,
# scores and per-frame log-likelihoods byte for byte, the same log lines
# (the feature programs' own lines aside), on a recipe-like data directory
# made from the fixtures (tools/gfeat-testdata: compressed 13-dim input,
# per-speaker CMVN, per-speaker fMLLR-like transforms): deltas (tri1),
# LDA+MLLT (tri2) with the skx profile and with hsw at 2 OpenBLAS threads,
# LDA+MLLT + per-speaker transforms (SAT's chain), a speaker without CMVN stats,
# small batches, long utterances on the host decoder (GALIGN_GPU_LONG_FRAMES);
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
unset KIO_FEATS_PIPE

if [ "${GFEAT_EMU:-0}" != 1 ]; then
  . "$here/lib/gpu-probe.sh"
  gpu_probe_align "$prog" "$tmp"
fi

fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
mkdir -p "$tmp/d" "$tmp/dm"
"$prep" --fmllr=40 ark:feats/delta.ark "$tmp/d" 2>/dev/null || { echo "FAIL: gfeat-testdata"; exit 1; }
"$prep" --drop-last-speaker ark:feats/delta.ark "$tmp/dm" 2>/dev/null || { echo "FAIL: gfeat-testdata"; exit 1; }

# Log lines to compare: the program's own in order (not VLOG), and
# apply-cmvn's warnings as a set (the CPU chain's thread prints them at
# times of its own); the feature programs' command lines and final LOG
# lines are the CPU chain's only.
norm() {
  grep -E '^(LOG|WARNING|ERROR) \(gmm-align-compiled' "$1" | grep -v -E 'Using GPU' |
    sed -E 's/^([A-Z]+ \([a-z-]+)\[[^]]*\]/\1/'
  grep -E '^(WARNING|ERROR) \(apply-cmvn' "$1" | sed -E 's/^([A-Z]+ \([a-z-]+)\[[^]]*\]/\1/' | sort
}

n=0
# name; model; data dir; apply-cmvn options; the chain after it; env; options
while IFS=';' read -r name model dd cmvnopt rest envs opts; do
  [ -z "$name" ] && continue
  n=$((n + 1))
  feats="ark,s,cs:apply-cmvn $cmvnopt --utt2spk=ark:$tmp/$dd/utt2spk scp:$tmp/$dd/cmvn.scp scp:$tmp/$dd/feats.scp ark:- |$rest"
  for g in 0 1; do
    # shellcheck disable=SC2086
    env $envs KIO_FEATS_GPU=$g "$prog" --verbose=1 --use-gpu=yes --transition-scale=1.0 \
      --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40 $opts \
      --write-per-frame-acoustic-loglikes="ark:$tmp/$name.$g.pf" models/$model/final.mdl \
      "ark:gunzip -c graphs/$model.fsts.gz|" "$feats" "ark:$tmp/$name.$g.ali" \
      "ark,t:$tmp/$name.$g.scores" >"$tmp/$name.$g.log" 2>&1
    echo $? >"$tmp/$name.$g.rc"
  done
  [ "$(cat "$tmp/$name.1.rc")" = "$(cat "$tmp/$name.0.rc")" ] ||
    fail "$name: exit $(cat "$tmp/$name.1.rc") with KIO_FEATS_GPU=1, $(cat "$tmp/$name.0.rc") without"
  grep -q "Features computed on the GPU" "$tmp/$name.0.log" && fail "$name: GPU features with KIO_FEATS_GPU=0"
  if [ "${name#cpu-}" != "$name" ]; then  # not for the device: the CPU chain, with a VLOG line
    grep -q "Features not computed on the GPU" "$tmp/$name.1.log" ||
      fail "$name: no 'Features not computed on the GPU' line"
    grep -q "Feature pipeline computed in-process" "$tmp/$name.1.log" ||
      fail "$name: the CPU chain did not run"
  else
    grep -q "Features computed on the GPU" "$tmp/$name.1.log" ||
      fail "$name: features not computed on the GPU: $(grep -m1 'Features not computed' "$tmp/$name.1.log")"
    grep -q -E "likelihoods of [1-9][0-9]* utterances read them on the device" "$tmp/$name.1.log" ||
      fail "$name: the likelihoods did not read the device features"
  fi
  for x in ali scores pf; do
    cmp -s "$tmp/$name.0.$x" "$tmp/$name.1.$x" || fail "$name: $x differs with KIO_FEATS_GPU=1"
  done
  [ -s "$tmp/$name.1.ali" ] || fail "$name: no alignments"
  if ! diff <(norm "$tmp/$name.0.log") <(norm "$tmp/$name.1.log") >"$tmp/$name.diff"; then
    fail "$name: log lines differ (< CPU chain, > device chain):"; head -20 "$tmp/$name.diff" | sed 's/^/    /'
  fi
done <<EOF
delta;tri1;d;; add-deltas ark:- ark:- |;;
delta-b7-long;tri1;d;; add-deltas ark:- ark:- |;GALIGN_GPU_LONG_FRAMES=400;--batch-size=7
lda-b7-long;tri2;d;; splice-feats --left-context=3 --right-context=3 ark:- ark:- | transform-feats models/tri2/final.mat ark:- ark:- |;GALIGN_GPU_LONG_FRAMES=300;--batch-size=7
nospk;tri1;dm;; add-deltas ark:- ark:- |;;--batch-size=5
cpu-select;tri1;d;; select-feats 0-12 ark:- ark:- | add-deltas ark:- ark:- |;;
lda;tri2;d;; splice-feats --left-context=3 --right-context=3 ark:- ark:- | transform-feats models/tri2/final.mat ark:- ark:- |;;
lda-hsw2;tri2;d;; splice-feats --left-context=3 --right-context=3 ark:- ark:- | transform-feats models/tri2/final.mat ark:- ark:- |;KIO_BLAS_PROFILE=hsw KIO_FEATS_BLAS_THREADS=2;--batch-size=9
sat;tri2;d;; splice-feats --left-context=3 --right-context=3 ark:- ark:- | transform-feats models/tri2/final.mat ark:- ark:- | transform-feats --utt2spk=ark:$tmp/d/utt2spk ark:$tmp/d/trans.ark ark:- ark:- |;;--batch-size=10
sat-hsw2-long;tri2;d;; splice-feats --left-context=3 --right-context=3 ark:- ark:- | transform-feats models/tri2/final.mat ark:- ark:- | transform-feats --utt2spk=ark:$tmp/d/utt2spk ark:$tmp/d/trans.ark ark:- ark:- |;KIO_BLAS_PROFILE=hsw KIO_FEATS_BLAS_THREADS=2 GALIGN_GPU_LONG_FRAMES=400;
EOF
[ $n -eq 9 ] || fail "only $n cases run"
grep -q "No normalization statistics" "$tmp/nospk.1.log" || fail "nospk: no apply-cmvn warning on the GPU path"
if [ $fails -eq 0 ]; then echo "gpu-feats: $n cases identical with KIO_FEATS_GPU=1"; exit 0; fi
exit 1
