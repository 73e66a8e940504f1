#!/bin/bash
# Where the aligner's retry passes should run (KALDI_GPU_DEV_RETRY=host or
# device): one mono_ali-size job (steps/align_si.sh on the mono model, beams
# 10/40) aligned both ways on its own context and through the GPU service
# (1 and NJ copies at once), with the decoder's kernel time, the host
# retries' time, the wall time, and the outputs compared between the two
# ways (they must be identical).
#   here:   dev/device/retry-probe.sh pack EXP DATA LANG [NUTT]
#           EXP: a mono dir (final.mdl, tree) of the synth-s5 recipe
#           (egs/synth/s5/run.sh --stop-stage 1), DATA its data/train, LANG
#           data/lang; NUTT utterances (default 1538, one job of align_si
#           --nj 16 on data/train_x4) -> .monoprobe/ (graphs, raw features,
#           CMVN, model; ~11 MB). Then dev/device/device-pack.sh.
#           PROBE_ROTATE=N (default 11): the transcripts of every Nth
#           utterance rotated among them, so that ~9% fail the beam-10 pass
#           and most of those the beam-40 one, as the H200's mono jobs do
#           (Kaldi's "Retried 140 out of 1538"); a mono model trained
#           elsewhere may fail none (0: no rotation).
#   device: dev/device/retry-probe.sh run [NJ]   (carry [".carry", ".monoprobe"])
#           logs under $OUT: probe.md (the table), one log per run.
# PROBE_DIR (default .monoprobe) and PROBE_BIN (default .carry/gmmbin-gpu)
# point elsewhere, e.g. a small pack and `make emu`'s programs to try the
# script without a GPU.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
P=${PROBE_DIR:-$top/.monoprobe}
case ${1:-} in
  pack)
    [ $# -ge 4 ] || { echo "usage: $0 pack EXP DATA LANG [NUTT]" >&2; exit 1; }
    exp=$2 data=$3 lang=$4 nutt=${5:-1538}
    rm -rf "$P"; mkdir -p "$P"
    head -n "$nutt" "$data/feats.scp" >"$P/feats.scp"
    cut -d' ' -f1 "$P/feats.scp" >"$P/utts"
    # raw features (13-dim, compressed as in the corpus), per-speaker CMVN
    copy-feats --compress=true scp:"$P/feats.scp" ark:"$P/raw.ark" || exit 1
    utils_filter() { awk 'NR==FNR{k[$1]=1;next} ($1 in k)' "$1" "$2"; }
    utils_filter "$P/utts" "$data/utt2spk" >"$P/utt2spk"
    cut -d' ' -f2 "$P/utt2spk" | sort -u >"$P/spks"
    utils_filter "$P/spks" "$data/cmvn.scp" >"$P/cmvn.scp"
    copy-matrix scp:"$P/cmvn.scp" ark:"$P/cmvn.ark" || exit 1
    utils_filter "$P/utts" "$data/text" >"$P/text"
    oov=$(cat "$lang/oov.int")
    awk 'NR==FNR{w[$1]=$2;next} {printf "%s",$1; for(i=2;i<=NF;i++) printf " %s",($i in w)?w[$i]:"'"$oov"'"; print ""}' \
      "$lang/words.txt" "$P/text" >"$P/text.int"
    rot=${PROBE_ROTATE:-11}
    if [ "$rot" -gt 0 ]; then
      awk -v n="$rot" 'NR%n==0 {k[++m]=$1; $1=""; t[m]=$0; next} {print}
        END {for (i = 1; i <= m; i++) print k[i] t[i % m + 1]}' "$P/text.int" |
        LC_ALL=C sort >"$P/text.rot" && mv "$P/text.rot" "$P/text.int"
    fi
    compile-train-graphs --read-disambig-syms="$lang/phones/disambig.int" "$exp/tree" \
      "$exp/final.mdl" "$lang/L.fst" ark:"$P/text.int" "ark:|gzip -c >$P/graphs.fsts.gz" || exit 1
    cp "$exp/final.mdl" "$P/final.mdl"
    rm -f "$P/feats.scp" "$P/cmvn.scp" "$P/spks" "$P/text"
    du -sh "$P"; exit 0 ;;
  run) nj=${2:-16} ;;
  *) echo "usage: $0 pack EXP DATA LANG [NUTT] | run [NJ]" >&2; exit 1 ;;
esac

[ -f "$P/final.mdl" ] || { echo "run: no .monoprobe (pack it here, carry it)" >&2; exit 1; }
export LD_LIBRARY_PATH="$top/.carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
bin=${PROBE_BIN:-$top/.carry/gmmbin-gpu}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=$(mktemp -d)
{ date -u; nvidia-smi -L; nproc; } >"$OUT/env.txt" 2>&1
feats="ark,s,cs:apply-cmvn --utt2spk=ark:$P/utt2spk ark:$P/cmvn.ark ark:$P/raw.ark ark:- | add-deltas ark:- ark:- |"
# the graphs unpacked once: the reading is not what is measured
gunzip -c "$P/graphs.fsts.gz" >"$W/graphs.fsts"
align() {  # align WAY TAG [service]; output ali in $W/TAG.ali, log $OUT/TAG.log
  local way=$1 tag=$2 svc=${3:-no}
  # one service per way (its own directory): it takes the way of the job that starts it
  KALDI_GPU_SERVICE=$svc KALDI_GPU_SERVICE_DIR=$W/svc-$way KALDI_GPU_SERVICE_IDLE=3 \
    KALDI_GPU_DEV_RETRY=$way KALDI_GPU_SERVICE_VERBOSE=2 \
    "$bin/gmm-align-compiled" --verbose=2 --use-gpu=yes --transition-scale=1.0 \
    --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40 --careful=false \
    "$P/final.mdl" "ark:$W/graphs.fsts" "$feats" "ark:$W/$tag.ali" 2>"$OUT/$tag.log"
}
summ() {  # one table row from a run's log
  local tag=$1 wall=$2 f=$OUT/$1.log
  local vit ret
  vit=$(grep -o 'Viterbi [0-9.]* s' "$f" | tail -1 | awk '{print $2}')
  ret=$(grep -o 'Retry passes on host threads: [0-9.]* s of thread time, [0-9.]* s waited' "$f" |
        awk '{t+=$6; w+=$11} END {if (NR) printf "%.3f / %.3f (%d runs)", t, w, NR}')
  echo "| $tag | $wall | ${vit:--} | ${ret:--} | $(grep -o 'Retried [0-9]* out of [0-9]*' "$f") |"
}
echo "| run | wall s | decoder kernels s (own context) | host retries: thread s / waited s | retries |" >"$OUT/probe.md"
echo "|---|---|---|---|---|" >>"$OUT/probe.md"
for way in device host device host; do  # twice each, alternating: warm-up and drift
  t0=$(date +%s.%N); align $way own-$way no; rc=$?; t1=$(date +%s.%N)
  summ own-$way "$(echo "$t1 - $t0" | bc) (rc $rc)" >>"$OUT/probe.md"
done
# through the service: 1 job, then NJ jobs at once (align_si --nj NJ's shape)
for way in device host; do
  mkdir -p "$W/svc-$way"; chmod 700 "$W/svc-$way"
  t0=$(date +%s.%N); align $way svc1-$way yes; rc=$?; t1=$(date +%s.%N)
  summ svc1-$way "$(echo "$t1 - $t0" | bc) (rc $rc)" >>"$OUT/probe.md"
  t0=$(date +%s.%N)
  for j in $(seq 1 "$nj"); do align $way "svc$nj-$way-$j" yes & done; wait
  t1=$(date +%s.%N)
  echo "| svc$nj-$way ($nj jobs at once) | $(echo "$t1 - $t0" | bc) | - | - | - |" >>"$OUT/probe.md"
  sleep 5  # the service exits when idle; its log stays
  cat "$W/svc-$way"/service-*.log >"$OUT/service-$way.log" 2>/dev/null
  grep -h "align connection" "$OUT/service-$way.log" >"$OUT/service-lines-$way.txt" 2>/dev/null
  echo "| svc-$way connections: aligning s summed | $(grep -o '[0-9.]* s aligning' "$OUT/service-$way.log" |
    awk '{t+=$1} END {printf "%.3f over %d", t, NR}') | - | $(grep -o 'Retry passes on host threads: [0-9.]* s of thread time, [0-9.]* s waited' \
    "$OUT/service-$way.log" | awk '{t+=$6; w+=$11} END {if (NR) printf "%.3f / %.3f (%d runs)", t, w, NR}') | - |" >>"$OUT/probe.md"
done
# the same outputs every way
# (not the command line, the backend's line, VLOG lines, the feature
# programs' lines, which come at other times, or locations)
strip_t() { sed -e 1d -e '/:galign_aligner_new()/d' -e '/VLOG/d' -e '/^[A-Z]* (apply-cmvn\[/d' \
  -e '/^[A-Z]* (add-deltas\[/d' -e '/^apply-cmvn \|^add-deltas /d' "$1" | sed 's/^\([A-Z]*\) ([^)]*) /\1 /'; }
{
  echo; echo "Identical alignments and messages (vs own-device):"
  for t in own-host svc1-device svc1-host "svc$nj-device-1" "svc$nj-host-$nj"; do
    a=same; cmp -s "$W/own-device.ali" "$W/$t.ali" || a=DIFFERENT
    m=same; diff -q <(strip_t "$OUT/own-device.log") <(strip_t "$OUT/$t.log") >/dev/null || m=DIFFERENT
    echo "- $t: alignments $a, messages $m"
  done
} >>"$OUT/probe.md"
cat "$OUT/probe.md"
rm -rf "$W"
