#!/bin/bash
# Margin mode (gpu-align/align-margin.h): realignment with a re-estimated
# model (kaldi/mono/est.mdl, Kaldi's gmm-est of mono's final.acc) around the
# old model's alignment (kaldi/mono/ali.ark), against Kaldi's full search
# with the new model (margin/mono-est.ali.ark, made by the bundle's
# gmm-align-compiled; the old and new alignments differ on 9.4% of frames):
#  - --margin=64: >= 99.9% of frames equal to Kaldi's, every utterance banded;
#  - --margin=0: the band is the prior's own states: the output is the prior
#    (so the band really restricts the search);
#  - fallbacks counted by reason: priors missing, of another length, not a
#    path of the graph (tri1's alignments on mono graphs);
#  - KALDI_GPU_MARGIN=64 with the recipes' output "ark:|gzip -c >FILE": the
#    prior is read from FILE before it is replaced; no FILE: full search,
#    byte-identical to the plain run; a bad value: full search;
#  - gmm-align-acc-compiled takes the same options (stats of the banded run
#    equal those of the full run when the alignments are equal);
#  - --margin=-1: ERROR, exit 255; unreadable --prior-alignments: exit 255.
# Env: BIN, TOP, TOOLS; USE_GPU (default no). Exit 0 pass, 1 fail, 77 skip.
set -u
: "${BIN:?}" "${TOP:?}"
BIN=$(cd "$BIN" && pwd) || exit 1
TOOLS=$(cd "${TOOLS:-$TOP/build/tools}" && pwd) || exit 1
USE_GPU=${USE_GPU:-no}
[ -x "$BIN/gmm-align-compiled" ] || { echo "SKIP: gmm-align-compiled not built"; exit 77; }
[ -x "$TOOLS/ali-compare" ] || { echo "SKIP: ali-compare not built"; exit 77; }
cd "$TOP/tests/data" || exit 1
export PATH="$BIN:$PATH"
tmp=$(mktemp -d /tmp/margin-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
opts="--use-gpu=$USE_GPU --transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40"
g="ark:gunzip -c graphs/mono.fsts.gz|"
pct() { "$TOOLS/ali-compare" --print-args=false "$1" "$2" 2>/dev/null | awk '$1 == "percent-equal" {print $2}'; }
margin_line() { grep -o 'Margin [0-9]*: .*' "$1"; }

gmm-align-compiled $opts --prior-alignments=ark:kaldi/mono/ali.ark --margin=64 \
  kaldi/mono/est.mdl "$g" ark:feats/delta.ark "ark:$tmp/m64.ark" 2>"$tmp/m64.log" ||
  fail "margin 64: exit $?"
p=$(pct ark:margin/mono-est.ali.ark "ark:$tmp/m64.ark")
echo "margin 64 vs Kaldi's full search with the new model: $p% of frames"
awk -v p="$p" 'BEGIN {exit !(p + 0 >= 99.9)}' || fail "margin 64: $p% < 99.9%"
[ "$(margin_line "$tmp/m64.log")" = "Margin 64: 40 of 40 utterances aligned inside the band around the prior alignment; full search for 0" ] ||
  fail "margin 64: summary line: $(margin_line "$tmp/m64.log")"

gmm-align-compiled $opts --prior-alignments=ark:kaldi/mono/ali.ark --margin=0 \
  kaldi/mono/est.mdl "$g" ark:feats/delta.ark "ark:$tmp/m0.ark" 2>"$tmp/m0.log" ||
  fail "margin 0: exit $?"
p=$(pct ark:kaldi/mono/ali.ark "ark:$tmp/m0.ark")
[ "$p" = 100.0000 ] || fail "margin 0: output is not the prior ($p%)"

# Utterances of 12-16 s (margin/med: 4 fixture utterances each, Kaldi's
# graphs, prior and full-search reference with the new model).
gmm-align-compiled $opts --prior-alignments=ark:margin/med/prior.ali --margin=64 \
  kaldi/mono/est.mdl "ark:gunzip -c margin/med/mono.fsts.gz|" ark:margin/med/feats.ark \
  "ark:$tmp/med.ark" 2>"$tmp/med.log" || fail "med: exit $?"
p=$(pct ark:margin/med/est.ali "ark:$tmp/med.ark")
echo "margin 64, utterances of 12-16 s, vs Kaldi's full search: $p% of frames"
awk -v p="$p" 'BEGIN {exit !(p + 0 >= 99.9)}' || fail "med: $p% < 99.9%"
grep -q 'Margin 64: 10 of 10' "$tmp/med.log" || fail "med: $(margin_line "$tmp/med.log")"

# Careful alignment (the graph followed by a final state and a copy of
# itself): banded like any other; the same alignments as its full search.
gmm-align-compiled $opts --careful=true --prior-alignments=ark:kaldi/mono/ali.ark \
  kaldi/mono/est.mdl "$g" ark:feats/delta.ark "ark:$tmp/careful.ark" 2>"$tmp/careful.log" ||
  fail "careful: exit $?"
grep -q 'Margin 64: 40 of 40' "$tmp/careful.log" || fail "careful: $(margin_line "$tmp/careful.log")"
gmm-align-compiled $opts --careful=true kaldi/mono/est.mdl "$g" ark:feats/delta.ark \
  "ark:$tmp/careful-full.ark" 2>/dev/null || fail "careful full: exit $?"
p=$(pct "ark:$tmp/careful-full.ark" "ark:$tmp/careful.ark")
awk -v p="$p" 'BEGIN {exit !(p + 0 >= 99.9)}' || fail "careful: $p% of the full search's frames"

# Fallbacks: 3 priors dropped, 2 cut short, 1 from tri1 (not in the graph).
"$TOOLS/replicate-archive" --print-args=false --type=ali ark:kaldi/mono/ali.ark ark,t:- 2>/dev/null |
  sed 's/^r000-//' >"$tmp/prior.txt"
"$TOOLS/replicate-archive" --print-args=false --type=ali ark:kaldi/tri1/ali.ark ark,t:- 2>/dev/null |
  sed 's/^r000-//' >"$tmp/tri1.txt"
n=$(wc -l <"$tmp/prior.txt")
[ "$n" = 40 ] || fail "prior text: $n lines"
{ sed -n '1,30p' "$tmp/prior.txt" | awk 'NR <= 2 {NF = NF - 1} {print}'
  sed -n '31p' "$tmp/tri1.txt"; sed -n '32,37p' "$tmp/prior.txt"; } >"$tmp/mixed.txt"
gmm-align-compiled $opts --prior-alignments=ark,t:$tmp/mixed.txt --margin=64 \
  kaldi/mono/est.mdl "$g" ark:feats/delta.ark "ark:$tmp/mix.ark" 2>"$tmp/mix.log" ||
  fail "fallbacks: exit $?"
want="Margin 64: 34 of 40 utterances aligned inside the band around the prior alignment; full search for 6 (no prior 3, prior of another length 2, prior not a path of the graph 1)"
[ "$(margin_line "$tmp/mix.log")" = "$want" ] || fail "fallbacks: $(margin_line "$tmp/mix.log")"
p=$(pct ark:margin/mono-est.ali.ark "ark:$tmp/mix.ark")
awk -v p="$p" 'BEGIN {exit !(p + 0 >= 99.9)}' || fail "fallbacks: $p% < 99.9%"

# KALDI_GPU_MARGIN: the prior comes from the file the output replaces.
gzip -c kaldi/mono/ali.ark >"$tmp/ali.1.gz"
KALDI_GPU_MARGIN=0 gmm-align-compiled $opts kaldi/mono/est.mdl "$g" ark:feats/delta.ark \
  "ark:|gzip -c >$tmp/ali.1.gz" 2>"$tmp/env.log" || fail "env: exit $?"
grep -q "KALDI_GPU_MARGIN: 40 previous alignments read from $tmp/ali.1.gz" "$tmp/env.log" ||
  fail "env: prior not read from the output file"
p=$(pct ark:kaldi/mono/ali.ark "ark:gunzip -c $tmp/ali.1.gz|")
[ "$p" = 100.0000 ] || fail "env: margin 0 output is not the prior read from the file ($p%)"
KALDI_GPU_MARGIN=64 gmm-align-compiled $opts kaldi/mono/est.mdl "$g" ark:feats/delta.ark \
  "ark:|gzip -c >$tmp/ali.1.gz" 2>"$tmp/env2.log" || fail "env 64: exit $?"
grep -q 'Margin 64: 40 of 40' "$tmp/env2.log" || fail "env 64: $(margin_line "$tmp/env2.log")"
gmm-align-compiled $opts kaldi/mono/est.mdl "$g" ark:feats/delta.ark "ark:$tmp/full.ark" \
  2>"$tmp/full.log" || fail "full: exit $?"
KALDI_GPU_MARGIN=64 gmm-align-compiled $opts kaldi/mono/est.mdl "$g" ark:feats/delta.ark \
  "ark:|gzip -c >$tmp/new.2.gz" 2>"$tmp/env3.log" || fail "env no file: exit $?"
grep -q "KALDI_GPU_MARGIN: no previous alignments in $tmp/new.2.gz: full search" "$tmp/env3.log" ||
  fail "env no file: no LOG line"
grep -q 'full search for 40 (no prior 40)' "$tmp/env3.log" || fail "env no file: counts"
gunzip -c "$tmp/new.2.gz" | cmp -s - "$tmp/full.ark" || fail "env no file: output differs from full search"
KALDI_GPU_MARGIN=abc gmm-align-compiled $opts kaldi/mono/est.mdl "$g" ark:feats/delta.ark \
  "ark:$tmp/bad.ark" 2>"$tmp/env4.log" || fail "env bad: exit $?"
grep -q 'KALDI_GPU_MARGIN=abc is not a number of frames: full search' "$tmp/env4.log" ||
  fail "env bad: no LOG line"
cmp -s "$tmp/bad.ark" "$tmp/full.ark" || fail "env bad: output differs from full search"
KALDI_GPU_MARGIN=64 gmm-align-compiled $opts kaldi/mono/est.mdl "$g" ark:feats/delta.ark \
  "ark,t:$tmp/t.txt" 2>"$tmp/env5.log" || fail "env other output: exit $?"
grep -q 'is not of the form ark:|gzip -c >FILE: full search' "$tmp/env5.log" ||
  fail "env other output: no LOG line"
head -c 5000 kaldi/mono/ali.ark | gzip -c >"$tmp/ali.3.gz"
KALDI_GPU_MARGIN=64 gmm-align-compiled $opts kaldi/mono/est.mdl "$g" ark:feats/delta.ark \
  "ark:|gzip -c >$tmp/ali.3.gz" 2>"$tmp/env6.log" || fail "env corrupt file: exit $?"
grep -q 'could not be read to its end: full search' "$tmp/env6.log" || fail "env corrupt: no LOG line"
! grep -q '^ERROR' "$tmp/env6.log" || fail "env corrupt: ERROR line"
gunzip -c "$tmp/ali.3.gz" | cmp -s - "$tmp/full.ark" || fail "env corrupt: output differs from full search"

# One pass: same options; equal alignments give equal statistics.
if [ -x "$BIN/gmm-align-acc-compiled" ]; then
  gmm-align-acc-compiled $opts --prior-alignments=ark:kaldi/mono/ali.ark --margin=64 \
    kaldi/mono/est.mdl "$g" ark:feats/delta.ark "ark:$tmp/a1.ark" "$tmp/a1.acc" 2>"$tmp/a1.log" ||
    fail "align-acc margin: exit $?"
  gmm-align-acc-compiled $opts kaldi/mono/est.mdl "$g" ark:feats/delta.ark "ark:$tmp/a2.ark" \
    "$tmp/a2.acc" 2>"$tmp/a2.log" || fail "align-acc full: exit $?"
  grep -q 'Margin 64: 40 of 40' "$tmp/a1.log" || fail "align-acc: no margin line"
  if cmp -s "$tmp/a1.ark" "$tmp/a2.ark"; then
    cmp -s "$tmp/a1.acc" "$tmp/a2.acc" || fail "align-acc: same alignments, different stats"
  else
    echo "note: align-acc margin alignments differ from the full search's"
  fi
fi

# Bad values.
gmm-align-compiled $opts --prior-alignments=ark:kaldi/mono/ali.ark --margin=-1 \
  kaldi/mono/est.mdl "$g" ark:feats/delta.ark "ark:$tmp/x.ark" 2>"$tmp/neg.log"
rc=$?
[ $rc = 255 ] || fail "--margin=-1: exit $rc, want 255"
gmm-align-compiled $opts --prior-alignments=ark:$tmp/none.ark kaldi/mono/est.mdl "$g" \
  ark:feats/delta.ark "ark:$tmp/x.ark" 2>"$tmp/none.log"
rc=$?
[ $rc = 255 ] || fail "missing --prior-alignments: exit $rc, want 255"
grep -q '^ERROR' "$tmp/none.log" || fail "missing --prior-alignments: no ERROR line"

if [ $fails -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "all margin checks passed (use-gpu=$USE_GPU)"
