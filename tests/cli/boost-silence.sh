#!/bin/bash
# The steps scripts' model rspecifier "gmm-boost-silence --boost=B SIL MDL - |"
# computed in process (base/feat/feat-model.c) against Kaldi's program run as
# the real pipe (KALDI_GPU_FEATS_PIPE=0, the Kaldi bundle's bin first on
# PATH): gmm-align-compiled (CPU path) and gmm-acc-stats-ali with the same
# outputs and the same lines (the pipe's lines may come at another place
# among the program's: compared sorted, versions aside); the model bytes
# themselves are tests/parity/check_boost.c's. Needs the bundle (SKIP
# without it).
# Env: BIN, TOP. Exit 0 pass, 1 fail, 77 skip.
set -u
: "${BIN:?}" "${TOP:?}"
BIN=$(cd "$BIN" && pwd) || exit 1
for p in gmm-align-compiled gmm-acc-stats-ali; do
  if [ ! -x "$BIN/$p" ]; then echo "SKIP: $BIN/$p not built"; exit 77; fi
done
tmp=$(mktemp -d /tmp/boost-cli.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
. "$TOP/tests/cli/lib/kaldi-bundle.sh"
kb=$(find_kaldi_bundle "$tmp")
if [ -z "$kb" ] || [ ! -x "$kb/bin/gmm-boost-silence" ]; then
  echo "SKIP: no Kaldi bundle with gmm-boost-silence (KALDI_BUNDLE)"; exit 77
fi
cd "$TOP/tests/data" || exit 1
export KALDI_GPU_SERVICE=no PATH="$kb/bin:$PATH"
unset KALDI_GPU_FEATS_PIPE
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
norm() { sed -e 's/\[[0-9.~a-z-]*\]:/[V]:/' -e 's/[.]\(ours\|pipe\)[.]/.X./g' -e "s|$tmp/||g" "$1" | sort; }
sil=$(cat models/silence.csl)
opts="--use-gpu=no --transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40"

# name ; model ; boost options ; silence list ; graphs ; features ; alignments for the acc
while IFS=';' read -r name mdl bo list g f; do
  [ -z "$name" ] && continue
  m="gmm-boost-silence $bo $list $mdl - |"
  for how in pipe ours; do
    pipe=1
    [ $how = pipe ] && pipe=0
    # shellcheck disable=SC2086
    KALDI_GPU_FEATS_PIPE=$pipe "$BIN/gmm-align-compiled" --verbose=1 $opts "$m" \
      "ark:gunzip -c $g|" "ark:$f" "ark:$tmp/$name.$how.ali" 2>"$tmp/$name.$how.log"
    echo "exit $?" >>"$tmp/$name.$how.log"
    KALDI_GPU_FEATS_PIPE=$pipe "$BIN/gmm-acc-stats-ali" --use-gpu=no "$m" "ark:$f" \
      "ark:$tmp/$name.pipe.ali" "$tmp/$name.$how.acc" 2>"$tmp/$name.$how.acclog"
    echo "exit $?" >>"$tmp/$name.$how.acclog"
  done
  grep -q "Model pipeline computed in-process" "$tmp/$name.ours.log" ||
    fail "$name: not computed in process"
  grep -q "Model pipeline computed in-process" "$tmp/$name.pipe.log" &&
    fail "$name: computed in process with KALDI_GPU_FEATS_PIPE=0"
  grep -q "^exit 0" "$tmp/$name.ours.log" || fail "$name: gmm-align-compiled failed"
  cmp -s "$tmp/$name.ours.ali" "$tmp/$name.pipe.ali" || fail "$name: alignments differ"
  cmp -s "$tmp/$name.ours.acc" "$tmp/$name.pipe.acc" || fail "$name: statistics differ"
  diff <(norm "$tmp/$name.ours.log" | grep -v 'pipeline\|Time:') \
    <(norm "$tmp/$name.pipe.log" | grep -v 'pipeline\|Time:') >"$tmp/d" ||
    { fail "$name: gmm-align-compiled's lines differ"; head -20 "$tmp/d"; }
  diff <(norm "$tmp/$name.ours.acclog") <(norm "$tmp/$name.pipe.acclog") >"$tmp/d" ||
    { fail "$name: gmm-acc-stats-ali's lines differ"; head -20 "$tmp/d"; }
  grep -q "gmm-boost-silence.cc:93) Boosted weights" "$tmp/$name.ours.log" ||
    fail "$name: no Boosted line"
done <<EOF
mono-1;models/mono/final.mdl;--boost=1.0;$sil;graphs/mono.fsts.gz;feats/delta.ark
mono-1.5;models/mono/final.mdl;--boost=1.5;1:2:3;graphs/mono.fsts.gz;feats/delta.ark
tri1-shared;models/tri1/final.mdl;--boost=1.25 --binary=false;1;graphs/tri1.fsts.gz;feats/delta.ark
EOF
# A model Kaldi's program cannot read: the real pipe, its messages and status.
KALDI_GPU_FEATS_PIPE=1 "$BIN/gmm-align-compiled" $opts "gmm-boost-silence 1 $tmp/none.mdl - |" \
  "ark:gunzip -c graphs/mono.fsts.gz|" "ark:feats/delta.ark" "ark:$tmp/x.ali" 2>"$tmp/none.log"
rc=$?
[ $rc = 255 ] || fail "missing model: exit $rc, not 255"
grep -q "^ERROR (gmm-boost-silence" "$tmp/none.log" || fail "missing model: not Kaldi's ERROR"
[ $fails = 0 ] && echo "PASS: boost-silence" && exit 0
exit 1
