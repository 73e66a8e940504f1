#!/bin/bash
# Single-pass agreement with Kaldi inside a recipe: steps/align_si.sh with
# our programs first on PATH, from the *Kaldi side's* models (exp_kaldi/mono,
# tri1, tri2), compared with the Kaldi side's own align_si output
# (exp_kaldi/*_ali). Unlike the two full runs, where training from a flat
# start amplifies any rounding difference of the host's Kaldi over 40+
# iterations, both alignments here come from the same model and features:
# this is "frames aligned exactly as Kaldi aligns them".
#   dev/device/recipe-cross.sh CORPUS_DIR GPU_BIN KALDI_BUNDLE_DIR NJ TRAIN > cross.md
# CORPUS_DIR: the unpacked synth-s5 in which exp_kaldi exists. Writes
# exp_cross/<model>_ali there. Env: TOOLS (dir with ali-compare).
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -eq 5 ] || { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 1; }
corpus=$(cd "$1" && pwd) gpu_bin=$(cd "$2" && pwd) kb=$(cd "$3" && pwd) nj=$4 train=$5
tools=$(cd "${TOOLS:-$top/build/tools}" && pwd)
cd "$corpus" || exit 1
export KALDI_BUNDLE=$kb GPU_BIN=$gpu_bin KALDI_ONLY=false
. "$top/egs/synth/s5/path.sh" || exit 1
[ "$(command -v gmm-align-compiled)" = "$gpu_bin/gmm-align-compiled" ] || { echo "recipe-cross: PATH does not put $gpu_bin first" >&2; exit 1; }
echo "## Our align_si from the Kaldi side's models"
echo
echo "steps/align_si.sh --nj $nj with our programs first on PATH, model exp_kaldi/M, vs the Kaldi"
echo "side's exp_kaldi/M_ali (same model, same features, same graphs compiler)."
echo
echo "| model | wall s (ours) | wall s (Kaldi's, its run) | utterances identical | frames compared | frames identical | % frames |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for m in mono tri1 tri2; do
  [ -f "exp_kaldi/$m/final.mdl" ] && [ -d "exp_kaldi/${m}_ali" ] || continue
  rm -rf "exp_cross/${m}_ali"; mkdir -p exp_cross
  t0=$EPOCHREALTIME
  steps/align_si.sh --nj "$nj" --cmd run.pl "$train" data/lang "exp_kaldi/$m" "exp_cross/${m}_ali" \
    >"exp_cross/${m}_ali.log" 2>&1 || { echo "| $m | failed (exp_cross/${m}_ali.log) | | | | | |"; continue; }
  t1=$EPOCHREALTIME
  kw=$(awk -v s="${m}_ali" '$1 == s { print $2 }' exp_kaldi/stage_times 2>/dev/null)
  r=$("$tools/ali-compare" --print-args=false --print-diffs=true \
        "ark:gunzip -c $(ls exp_kaldi/${m}_ali/ali.*.gz | tr '\n' ' ')|" \
        "ark:gunzip -c $(ls exp_cross/${m}_ali/ali.*.gz | tr '\n' ' ')|" 2>/dev/null |
      awk '$1 == "diff" { d++ } $1 == "utterances-common" { u = $2 } $1 == "frames-compared" { f = $2 }
           $1 == "frames-equal" { e = $2 } $1 == "percent-equal" { p = $2 }
           END { printf "%d of %d | %d | %d | %s", u - d, u, f, e, p }')
  awk -v m="$m" -v a="$t0" -v b="$t1" -v kw="$kw" -v r="$r" 'BEGIN { printf "| %s | %.2f | %s | %s |\n", m, b - a, kw, r }'
done
