#!/bin/bash
# Margin mode vs full search on realignment with a re-estimated model
# (issue 11). Data: tests/data/margin/med (10 utterances of 12-16 s, each 4
# consecutive fixture utterances, mono graphs by Kaldi's
# compile-train-graphs), replicated MARGIN_COPIES times (default 256 = 10 h)
# with tools/replicate-archive: features, graphs, the prior (the old mono
# model's alignment, prior.ali) and the reference (Kaldi's full search with
# the re-estimated model kaldi/mono/est.mdl, est.ali).
# Runs, each timed by /usr/bin/time (wall, peak RSS) with the recipe options:
#   ours --use-gpu=yes full search / --margin=64 / --margin=64 with
#        KALDI_GPU_DEV_MARGIN_LIKELIHOODS=full (MARGIN_SKIP=gpu: left out)
#   ours --use-gpu=no  full search / --margin=64 (MARGIN_SKIP=cpu: left out)
#   Kaldi's gmm-align-compiled full search, when $KALDI_BUNDLE is set
# and prints a markdown table: seconds, x real time, RSS, % of frames equal
# to Kaldi's full search with the new model, and for ours the alignment
# step alone (--verbose=1's "Time:" line: alignment s = likelihoods +
# Viterbi + best path, without start-up, reading and writing). Env: BIN, TOOLS, MARGIN_COPIES,
# MARGIN_SKIP, MARGIN (default 64), MARGIN_DATA (default bench-data/margin).
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "${BIN:-$top/gmmbin-gpu}" && pwd) || exit 1
tools=$(cd "${TOOLS:-$top/build/tools}" && pwd) || exit 1
copies=${MARGIN_COPIES:-256}
skip=${MARGIN_SKIP:-}
margin=${MARGIN:-64}
data=${MARGIN_DATA:-$top/bench-data/margin}
fix=$top/tests/data
src=$fix/margin/med
mkdir -p "$data"
if [ "$(cat "$data/stamp" 2>/dev/null)" != "$copies" ]; then
  rm -f "$data/stamp"
  r="$tools/replicate-archive --print-args=false --copies=$copies"
  $r --type=matrix "ark:$src/feats.ark" "ark:$data/feats.ark" 2>/dev/null &&
  $r --type=fst "ark:gunzip -c $src/mono.fsts.gz|" "ark:|gzip -c >$data/mono.fsts.gz" 2>/dev/null &&
  $r --type=ali "ark:$src/prior.ali" "ark:$data/prior.ali" 2>/dev/null &&
  $r --type=ali "ark:$src/est.ali" "ark:$data/est.ali" 2>/dev/null || { echo "data: failed"; exit 1; }
  echo "$copies" >"$data/stamp"
fi
frames=$(( $(sed -n 's/.*over \([0-9]*\) frames\..*/\1/p' "$src/est.log") * copies ))
opts="--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40"
mdl=$fix/kaldi/mono/est.mdl
g="ark:gunzip -c $data/mono.fsts.gz|"
f="ark,s,cs:$data/feats.ark"
echo "| run | seconds | x real time | peak RSS MB | % frames = Kaldi full search (new model) | band | alignment s (likelihoods / Viterbi) |"
echo "|---|---|---|---|---|---|---|"
run() {  # NAME PROGRAM ARGS...
  local name=$1; shift
  /usr/bin/time -f '%e %M' -o "$data/$name.time" "$@" 2>"$data/$name.log"
  local rc=$?
  read -r s kb <"$data/$name.time"
  local pct
  pct=$("$tools/ali-compare" --print-args=false "ark:$data/est.ali" "ark:$data/$name.ali" 2>/dev/null |
        awk '$1 == "percent-equal" {print $2}')
  local band
  band=$(grep -o 'Margin [0-9]*: [0-9]* of [0-9]*' "$data/$name.log" | sed 's/Margin [0-9]*: //')
  local step
  step=$(sed -n 's/.* alignment \([0-9.]*\) s (on the [A-Z]*; phases summed over the aligner.s threads: likelihoods \([0-9.]*\) s, Viterbi \([0-9.]*\) s.*/\1 (\2 \/ \3)/p' \
         "$data/$name.log" | head -n 1)
  awk -v n="$name" -v s="$s" -v kb="$kb" -v p="$pct" -v fr="$frames" -v rc="$rc" -v b="$band" -v st="${step:--}" \
    'BEGIN {printf "| %s%s | %.2f | %.0f | %.0f | %s | %s | %s |\n", n, rc ? " (exit " rc ")" : "", s,
            fr / 100 / s, kb / 1024, p, b, st}'
}
for dev in gpu cpu; do
  case " $skip " in *" $dev "*) continue ;; esac
  u=yes; [ $dev = cpu ] && u=no
  run "$dev-full" "$bin/gmm-align-compiled" --use-gpu=$u --verbose=1 $opts "$mdl" "$g" "$f" "ark:$data/$dev-full.ali"
  run "$dev-margin$margin" "$bin/gmm-align-compiled" --use-gpu=$u --verbose=1 $opts \
    --prior-alignments=ark:$data/prior.ali --margin=$margin "$mdl" "$g" "$f" \
    "ark:$data/$dev-margin$margin.ali"
  # margin mode with every pdf's likelihood computed (the band only in the decoder)
  [ $dev = gpu ] && KALDI_GPU_DEV_MARGIN_LIKELIHOODS=full run "$dev-margin$margin-fullll" "$bin/gmm-align-compiled" \
    --use-gpu=$u --verbose=1 $opts --prior-alignments=ark:$data/prior.ali --margin=$margin "$mdl" "$g" "$f" \
    "ark:$data/$dev-margin$margin-fullll.ali"
done
if [ -n "${KALDI_BUNDLE:-}" ]; then
  (. "$KALDI_BUNDLE/env.sh"
   run kaldi-full gmm-align-compiled $opts "$mdl" "$g" "$f" "ark:$data/kaldi-full.ali")
fi
echo "($copies copies of 10 utterances of 12-16 s: $frames frames = $(awk -v f=$frames 'BEGIN {printf "%.2f", f / 360000}') h)"
