#!/bin/bash
# Bit-identity of the in-process feature pipelines with Kaldi's on a whole
# data dir (e.g. the recipe's data/train): deltas, CVN + deltas, LDA+MLLT,
# SAT (LDA + per-speaker fMLLR, one speaker in 7 without a transform), each
# read through build/tools/feat-copy both ways (KALDI_GPU_FEATS_PIPE=0: Kaldi's
# processes) and compared byte for byte, stderr lines too (sorted).
# usage: dev/oracles/featpipe-compare.sh DATA_DIR ; Kaldi's featbin on PATH or
# KALDI_BUNDLE. OpenBLAS threads: as Kaldi's would be (set
# OPENBLAS_NUM_THREADS to pin both sides). Exit 0 when all are identical.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
[ -n "${KALDI_BUNDLE:-}" ] && . "$KALDI_BUNDLE/env.sh"
# Round as the Kaldi on PATH does (its OpenBLAS kernels), unless told.
. "$top/dev/bench/feat-profile.sh"
feat_profile "$top"
echo "profile $KALDI_GPU_BLAS_PROFILE (OpenBLAS core ${FEAT_BLAS_CORE:-not asked})"
fc=$top/${BUILD:-build}/tools/feat-copy
d=$(cd "${1:?usage: $0 DATA_DIR}" && pwd)
tmp=$(mktemp -d /tmp/featpipe-cmp.XXXXXX); trap 'rm -rf "$tmp"' EXIT
python3 - "$d/utt2spk" "$tmp/trans.ark" <<'PY'
import sys, struct, random
random.seed(7)
spks = sorted(set(l.split()[1] for l in open(sys.argv[1])))
with open(sys.argv[2], 'wb') as f:
    for n, s in enumerate(spks):
        if n % 7 == 3: continue
        f.write(s.encode() + b' \0BFM \x04' + struct.pack('<i', 40) + b'\x04' + struct.pack('<i', 41))
        v = [(1.0 if i == j else 0.0) + random.uniform(-0.05, 0.05) for i in range(40) for j in range(41)]
        f.write(struct.pack('<%df' % len(v), *v))
PY
mat=$top/tests/data/featpipe/final.mat
cmvn="apply-cmvn --utt2spk=ark:$d/utt2spk scp:$d/cmvn.scp scp:$d/feats.scp ark:-"
lda="$cmvn | splice-feats --left-context=3 --right-context=3 ark:- ark:- | transform-feats $mat ark:- ark:-"
names=(deltas cvn lda sat)
pipes=("$cmvn | add-deltas ark:- ark:-"
       "apply-cmvn --norm-vars=true --utt2spk=ark:$d/utt2spk scp:$d/cmvn.scp scp:$d/feats.scp ark:- | add-deltas ark:- ark:-"
       "$lda"
       "$lda | transform-feats --utt2spk=ark:$d/utt2spk ark:$tmp/trans.ark ark:- ark:-")
bad=0
# Log lines without the version ("[5.5...]" differs between builds), sorted.
strip() { sed 's/kaldi::KaldiFatalError//' "$1" | grep -E '^(LOG|WARNING|ERROR) \(|^(apply-cmvn|add-deltas|splice-feats|transform-feats) ' |
          grep -v '(feat-copy\[' | sed -E 's/\[[0-9][^]]*\]:/:/' | sort; }
for i in "${!names[@]}"; do
  KALDI_GPU_FEATS_PIPE=0 "$fc" "ark,s,cs:${pipes[$i]} |" "ark:$tmp/k.ark" 2>"$tmp/k.log"
  "$fc" "ark,s,cs:${pipes[$i]} |" "ark:$tmp/o.ark" 2>"$tmp/o.log"
  if cmp -s "$tmp/k.ark" "$tmp/o.ark" && diff -q <(strip "$tmp/k.log") <(strip "$tmp/o.log") >/dev/null; then
    echo "${names[$i]}: identical ($(stat -c %s "$tmp/o.ark") bytes; $(grep -c . <(strip "$tmp/o.log")) log lines)"
  else
    echo "${names[$i]}: DIFFERENT"; cmp "$tmp/k.ark" "$tmp/o.ark" | head -1; diff <(strip "$tmp/k.log") <(strip "$tmp/o.log") | head -5
    bad=1
  fi
done
exit $bad
