#!/bin/bash
# The aligning programs read their features by random access; with a
# recognised chain in the rspecifier the random-access reader takes the
# chain's matrices (base/io/table-ra.c). CPU path, on a recipe-like directory
# made from the fixtures (tools/gfeat-testdata: compressed 13-dim input,
# per-speaker CMVN and transforms, a speaker without CMVN stats):
#  - gmm-align-compiled and gmm-align-acc-compiled with the chain in the
#    rspecifier ("ark,s,cs:" read ahead on a thread, plain "ark:" without;
#    1 and 3 feature threads) = the same programs on the archive the chain
#    wrote through feat-copy (the sequential reader: tests/cli/featpipe.sh
#    checks those bytes against Kaldi's): alignments, scores, statistics;
#  - the same chain behind a real pipe (the outer command is our feat-copy
#    reading the chain, so the program sees a real pipe): the same outputs,
#    exit status and program lines, also when the chain fails (a transform
#    file that does not exist: exit 255, the per-utterance lines the same).
# Env: BIN, TOP, TOOLS. Exit 0 pass, 1 fail, 77 skip.
set -u
: "${BIN:?}" "${TOP:?}" "${TOOLS:?}"
BIN=$(cd "$BIN" && pwd) || exit 1
TOOLS=$(cd "$TOOLS" && pwd) || exit 1
for x in "$BIN/gmm-align-compiled" "$BIN/gmm-align-acc-compiled" "$TOOLS/gfeat-testdata" "$TOOLS/feat-copy"; do
  if [ ! -x "$x" ]; then echo "SKIP: $x not built"; exit 77; fi
done
tmp=$(mktemp -d /tmp/feat-align-cli.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
cd "$TOP/tests/data" || exit 1
export KALDI_GPU_SERVICE=no
unset KALDI_GPU_FEATS_PIPE KALDI_GPU_FEATS_THREADS

fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
mkdir -p "$tmp/d"
"$TOOLS/gfeat-testdata" --fmllr=40 --drop-last-speaker ark:feats/delta.ark "$tmp/d" 2>/dev/null ||
  { echo "FAIL: gfeat-testdata"; exit 1; }
d=$tmp/d
opts="--use-gpu=no --transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40"
# The program's own lines (the chain's stages log under their own names).
own() { grep -E '^(LOG|WARNING|ERROR) \(gmm-align' "$1" | sed -e "s|$tmp/[a-z0-9.-]*|F|g"; }

n=0
while IFS=';' read -r name model chain; do
  [ -z "$name" ] && continue
  n=$((n + 1))
  ch="apply-cmvn --utt2spk=ark:$d/utt2spk scp:$d/cmvn.scp scp:$d/feats.scp ark:- |$chain"
  g="ark:gunzip -c graphs/$model.fsts.gz|"
  want=0
  [ "${name#fail-}" != "$name" ] && want=255
  if [ $want = 0 ]; then
    "$TOOLS/feat-copy" "ark:$ch" "ark:$tmp/$name.ark" 2>/dev/null || { fail "$name: feat-copy"; continue; }
    # shellcheck disable=SC2086
    "$BIN/gmm-align-compiled" $opts models/$model/final.mdl "$g" "ark:$tmp/$name.ark" \
      "ark:$tmp/$name.ref.ali" "ark,t:$tmp/$name.ref.scores" 2>"$tmp/$name.ref.log" ||
      { fail "$name: reference run"; continue; }
    [ -s "$tmp/$name.ref.ali" ] || fail "$name: nothing aligned"
  fi
  for v in "s1:ark,s,cs::1" "u3:ark::3" "s3:ark,s,cs::3" "pipe:ark,s,cs:pipe:1"; do
    IFS=: read -r tag opt how th <<<"$v"
    rx="$opt:$ch"
    [ "$how" = pipe ] && rx="$opt:$TOOLS/feat-copy --print-args=false 'ark:$ch' ark:- |"
    # shellcheck disable=SC2086
    KALDI_GPU_FEATS_THREADS=$th "$BIN/gmm-align-compiled" $opts models/$model/final.mdl "$g" "$rx" \
      "ark:$tmp/$name.$tag.ali" "ark,t:$tmp/$name.$tag.scores" 2>"$tmp/$name.$tag.log"
    rc=$?
    [ $rc = $want ] || fail "$name ($tag): exit $rc, expected $want"
    if [ $want = 0 ]; then
      cmp -s "$tmp/$name.ref.ali" "$tmp/$name.$tag.ali" || fail "$name ($tag): alignments differ from the archive's"
      cmp -s "$tmp/$name.ref.scores" "$tmp/$name.$tag.scores" || fail "$name ($tag): scores differ"
      diff <(own "$tmp/$name.ref.log") <(own "$tmp/$name.$tag.log") >/dev/null ||
        fail "$name ($tag): the program's lines differ from the archive run's"
      [ "$tag" = pipe ] || grep -q "Applied cepstral mean normalization" "$tmp/$name.$tag.log" ||
        fail "$name ($tag): no apply-cmvn line (chain not run in-process?)"
    fi
  done
  if [ $want = 0 ]; then
    # one pass: the statistics the archive gives
    # shellcheck disable=SC2086
    "$BIN/gmm-align-acc-compiled" $opts models/$model/final.mdl "$g" "ark:$tmp/$name.ark" \
      ark:/dev/null "$tmp/$name.ref.acc" 2>/dev/null || fail "$name: one-pass reference"
    # shellcheck disable=SC2086
    KALDI_GPU_FEATS_THREADS=3 "$BIN/gmm-align-acc-compiled" $opts models/$model/final.mdl "$g" "ark,s,cs:$ch" \
      ark:/dev/null "$tmp/$name.acc" 2>/dev/null || fail "$name: one pass with the chain"
    cmp -s "$tmp/$name.ref.acc" "$tmp/$name.acc" || fail "$name: one-pass statistics differ"
  else
    # the failed chain: the same program lines as behind a real pipe, but
    # those naming the pipe and how it ended (our feat-copy marks its cut
    # output, the chain just ends)
    ends='Pipe |RandomAccessTableReader|Object read failed'
    diff <(own "$tmp/$name.pipe.log" | grep -v -E "$ends") <(own "$tmp/$name.s1.log" | grep -v -E "$ends") \
      >"$tmp/$name.diff" ||
      { fail "$name: lines differ from the real pipe's (< pipe, > in-process):"; head -10 "$tmp/$name.diff" | sed 's/^/    /'; }
    grep -q "^ERROR" "$tmp/$name.s1.log" || fail "$name: no ERROR line"
  fi
done <<EOF
delta;tri1; add-deltas ark:- ark:- |
lda;tri2; splice-feats --left-context=3 --right-context=3 ark:- ark:- | transform-feats models/tri2/final.mat ark:- ark:- |
sat;tri2; splice-feats --left-context=3 --right-context=3 ark:- ark:- | transform-feats models/tri2/final.mat ark:- ark:- | transform-feats --utt2spk=ark:$d/utt2spk ark:$d/trans.ark ark:- ark:- |
fail-notrans;tri2; splice-feats --left-context=3 --right-context=3 ark:- ark:- | transform-feats $tmp/none.mat ark:- ark:- |
EOF
[ $n = 4 ] || fail "ran $n cases"
if [ $fails -gt 0 ]; then echo "feat-align: $fails failure(s)"; exit 1; fi
echo "feat-align: $n chains read by random access = the archive they write, and = a real pipe"
exit 0
