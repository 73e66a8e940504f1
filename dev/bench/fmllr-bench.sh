#!/bin/bash
# train_sat.sh's fMLLR estimation, Kaldi against ours (ali-to-post,
# weight-silence-post and gmm-est-fmllr ours, our directory first on PATH as
# tools/enable-recipe.sh makes it), with the script's command per job:
#   ali-to-post "ark:gunzip -c ali.JOB.gz|" ark:- |
#     weight-silence-post 0.0 $sil 0.mdl ark:- ark:- |
#     gmm-est-fmllr --fmllr-update-type=full --spk2utt=ark:spk2utt.JOB 0.mdl
#       "$sifeats" ark:- ark:trans.JOB
#   sifeats = apply-cmvn --utt2spk | splice-feats --left-context=3
#     --right-context=3 | transform-feats 0.mat
# on the recipe corpus' MFCC (BENCH_FMLLR_UTTS utterances per job from
# data/train_x4, else data/train; about 560k frames each for 1500, as a
# --nj 16 job of the H200 stage; the speakers those utterances belong to),
# the fixtures' tri2 model and LDA+MLLT matrix, alignments whose
# transition-ids are the fixtures' tri2 alignment's taken in turn.
# BENCH_FMLLR_JOBS jobs (default: the cores) run at once, as run.pl starts
# them; each side BENCH_FMLLR_REPEAT times (default 3): the phase's wall time
# (median) and its CPU seconds (every process of every job), and whether
# every job's transforms are byte-identical. Then one job alone with each
# program of Kaldi's pipe timed.
# usage: dev/bench/fmllr-bench.sh RECIPE_DIR   (synth-s5 unpacked)
# Env: KALDI_BUNDLE or KALDI_ROOT (needed: Kaldi's side, the feature pipe's
# programs, and our gmm-est-fmllr's update: it loads that Kaldi's OpenBLAS),
# BIN (our programs), BENCH_FMLLR_DIR (data and outputs, default
# bench-data/fmllr). Prints a markdown table.
set -u
rec=$(cd "${1:?usage: $0 RECIPE_DIR}" && pwd)
top=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "${BIN:-$top/gmmbin-gpu}" && pwd)
nj=${BENCH_FMLLR_JOBS:-$(nproc)}
utts=${BENCH_FMLLR_UTTS:-1500}
repeat=${BENCH_FMLLR_REPEAT:-3}
out=${BENCH_FMLLR_DIR:-$top/bench-data/fmllr}
fix=$top/tests/data
[ -x "$bin/gmm-est-fmllr" ] || { echo "fmllr-bench: $bin/gmm-est-fmllr not built"; exit 1; }
kbin=""
root=${KALDI_BUNDLE:-${KALDI_ROOT:-}}
for d in "$root/bin" "$root/src/gmmbin"; do [ -x "$d/gmm-est-fmllr" ] && kbin=$d; done
[ -n "$kbin" ] || { echo "fmllr-bench: no Kaldi (KALDI_BUNDLE or KALDI_ROOT) with gmm-est-fmllr"; exit 1; }
if [ -d "$root/src/bin" ]; then
  kpath=$root/src/bin:$root/src/gmmbin:$root/src/featbin
else
  kpath=$kbin
fi
[ -d "$root/lib" ] && export LD_LIBRARY_PATH="$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH=$kpath:$PATH LC_ALL=C
data=$rec/data/train_x4
[ -f "$data/feats.scp" ] || data=$rec/data/train
mkdir -p "$out"
cd "$out" || exit 1

# ---- data: per job feats.scp, utt2spk, ali.JOB.gz ----
if [ "$(cat stamp 2>/dev/null)" != "$nj $utts $data" ]; then
  rm -f stamp
  cp "$fix/models/tri2/final.mdl" 0.mdl && cp "$fix/featpipe/final.mat" 0.mat &&
    cp "$data/cmvn.scp" cmvn.scp || exit 1
  for ((j = 1; j <= nj; j++)); do
    awk -v n="$utts" -v j="$j" '{ a[NR] = $0 } END { for (i = 0; i < n; i++) print a[((j - 1) * n + i) % NR + 1] }' \
      "$data/feats.scp" | sort -u >"feats.$j.scp"
    awk 'NR == FNR { k[$1] = 1; next } ($1 in k)' "feats.$j.scp" "$data/utt2spk" >"utt2spk.$j"
    awk '{ u[$2] = u[$2] " " $1; if (!($2 in o)) { o[$2] = ++n; k[n] = $2 } }
         END { for (i = 1; i <= n; i++) print k[i] u[k[i]] }' "utt2spk.$j" >"spk2utt.$j"
    feat-to-len "scp:feats.$j.scp" ark,t:- 2>/dev/null |
      awk 'NR == FNR { for (i = 2; i <= NF; i++) t[n++] = $i; next }
           { printf "%s", $1; for (i = 0; i < $2; i++) printf " %s", t[p++ % n]; printf "\n" }' \
        "$fix/kaldi/tri2/ali.txt" - |
      copy-int-vector ark:- "ark:|gzip -c >ali.$j.gz" 2>/dev/null || exit 1
  done
  echo "$nj $utts $data" >stamp
fi
frames=$(feat-to-len scp:feats.1.scp ark,t:- 2>/dev/null | awk '{ s += $2 } END { print s }')
sil=$(cat "$fix/models/silence.csl")

job() {  # job SIDE J [PREFIX...]: one job, as run.pl runs train_sat.sh's command
  local side=$1 j=$2 p f
  shift 2
  p=$kpath:$PATH f="$*"
  # ours: no prefix in the feature pipe, which it computes in-process
  [ "$side" = ours ] && p=$bin:$p f=""
  PATH=$p bash -c "$* ali-to-post 'ark:gunzip -c ali.$j.gz|' ark:- |
    $* weight-silence-post 0.0 $sil 0.mdl ark:- ark:- |
    $* gmm-est-fmllr --fmllr-update-type=full --spk2utt=ark:spk2utt.$j 0.mdl 'ark,s,cs:$f apply-cmvn --utt2spk=ark:utt2spk.$j scp:cmvn.scp scp:feats.$j.scp ark:- | $f splice-feats --left-context=3 --right-context=3 ark:- ark:- | $f transform-feats 0.mat ark:- ark:- |' ark:- ark:$side.$j.trans" \
    2>"$side.$j.log"
}
phase() {  # phase SIDE: all jobs at once; prints "wall cpu"
  /usr/bin/time -f "%e %U %S" -o "time.$1" bash -c "
    $(declare -f job); kpath='$kpath' bin='$bin' sil='$sil'
    for ((j = 1; j <= $nj; j++)); do job $1 \$j & done; wait" || return 1
  awk '{ printf "%s %.2f\n", $1, $2 + $3 }' "time.$1"
}
median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

declare -A wall cpu ws cs
for ((r = 0; r < repeat; r++)); do  # the sides alternate: load drifts hit both
  for side in kaldi ours; do
    read -r w c < <(phase $side) || { echo "fmllr-bench: $side failed (see $out/$side.*.log)"; exit 1; }
    ws[$side]+="$w"$'\n' cs[$side]+="$c"$'\n'
  done
done
for side in kaldi ours; do
  wall[$side]=$(printf '%s' "${ws[$side]}" | median)
  cpu[$side]=$(printf '%s' "${cs[$side]}" | median)
done
same=yes
for ((j = 1; j <= nj; j++)); do cmp -s "kaldi.$j.trans" "ours.$j.trans" || same="NO (job $j)"; done
grep -h "Rounding as" ours.1.log | sed 's/^.*) /rounding: /' | head -1
spk=$(wc -l <spk2utt.1)
echo "host: $(nproc) cores; $nj jobs at once, $utts utterances ($frames frames, $spk speakers) each"
echo
echo "| side | phase wall s (median of $repeat) | CPU s (all processes) |"
echo "|---|---|---|"
echo "| Kaldi | ${wall[kaldi]} | ${cpu[kaldi]} |"
echo "| ours | ${wall[ours]} | ${cpu[ours]} |"
echo
echo "speed-up: $(awk "BEGIN { printf \"%.2f\", ${wall[kaldi]} / ${wall[ours]} }")x wall," \
  "$(awk "BEGIN { printf \"%.2f\", ${cpu[kaldi]} / ${cpu[ours]} }")x CPU; transforms identical: $same"
echo
echo "One job alone, each program (wall s, CPU s; gmm-est-fmllr's CPU includes the feature pipe"
echo "it started and waited for: its own is the rest; ours computes the features in-process):"
for side in kaldi ours; do
  rm -f "prog.$side"
  job $side 1 /usr/bin/time -a -o "prog.$side" -f "%e_%U_%S_%C"
  awk -F_ -v s="$side" '/^[0-9]/ { split($4, w, " "); c = $2 + $3
    printf "  %-6s %-20s %6.2f %6.2f\n", s, w[1], $1, c
    if (w[1] == "gmm-est-fmllr") printf "  %-6s %-20s %6s %6.2f\n", s, "  (itself)", "", c - o
    else if (w[1] != "ali-to-post" && w[1] != "weight-silence-post") o += c }' "prog.$side"
done
