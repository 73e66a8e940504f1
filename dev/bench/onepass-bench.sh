#!/bin/bash
# One process over ~100 h through the recipe's own features rspecifiers
# (issue 8's target: align + accumulate 100 h in <= 3 s on one GPU), with
# the recipe way (steps/align_si.sh --nj N: stock Kaldi, then ours first on
# PATH) side by side on the same data.
#   dev/bench/onepass-bench.sh CORPUS_DIR EXP_DIR GPU_BIN KALDI_BUNDLE_DIR OUT_DIR
# CORPUS_DIR: an unpacked synth-s5 (data/train_x4, data/lang, steps, utils);
# EXP_DIR holds tri1/ (deltas) and tri2/ (LDA+MLLT) models (final.mdl, tree,
# final.mat, *_opts). Makes CORPUS_DIR/data/onepass_x4_train_x4 (train_x4 four times,
# utterance and speaker ids prefixed c1- .. c4-, same feature archives: 99 h),
# compiles its training graphs with our compile-train-graphs (timed), then
# per model: ours gmm-align-acc-compiled in one process (default feature
# threads, and KALDI_GPU_FEATS_THREADS=1), ours gmm-align-compiled alone, and
# steps/align_si.sh --nj $NJ (default 16) with Kaldi and with ours.
# Writes OUT_DIR/onepass.md (table) and OUT_DIR/onepass-*.log.
# Env: ACC_ENVS (space-separated; each a comma-separated list of VAR=VALUE:
# gmm-align-acc-compiled again under it), ALIGN_FEAT_THREADS (e.g. "1 4 8": gmm-align-compiled again per
# KALDI_GPU_FEATS_THREADS value), ACC_SPLIT (1: one more run at --verbose=2 for the accumulator's split), USE_GPU (yes), NJ (16), MODELS ("tri1 tri2"), KALDI_SIDE (true: run Kaldi's align_si),
# SRC (data/train_x4) and COPIES (4): the data dir replicated (a quick check:
# SRC=data/train COPIES=1).
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -eq 5 ] || { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 1; }
corpus=$(cd "$1" && pwd) exp=$(cd "$2" && pwd) gpu_bin=$(cd "$3" && pwd) kb=$(cd "$4" && pwd)
mkdir -p "$5"; out=$(cd "$5" && pwd)
nj=${NJ:-16}
cd "$corpus" || exit 1
md=$out/onepass.md
now() { echo "$EPOCHREALTIME"; }
dt() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# ---- the data dir: SRC x COPIES, new utterance and speaker ids ----
x4=${SRC:-data/train_x4} copies=${COPIES:-4} x16=data/onepass_x${COPIES:-4}_$(basename "${SRC:-data/train_x4}")
if [ ! -f "$x16/.done" ]; then
  rm -rf "$x16"; mkdir -p "$x16"
  for f in feats.scp cmvn.scp utt2spk spk2utt text; do
    for c in $(seq 1 "$copies"); do
      case $f in
        utt2spk) awk -v p="c$c-" '{ print p $1, p $2 }' "$x4/$f" ;;
        spk2utt) awk -v p="c$c-" '{ printf "%s", p $1; for (i = 2; i <= NF; i++) printf " %s", p $i; print "" }' "$x4/$f" ;;
        *) sed "s/^/c$c-/" "$x4/$f" ;;
      esac
    done >"$x16/$f"
  done
  touch "$x16/.done"
fi
utts=$(awk '{ n++ } END { print n }' "$x16/feats.scp")
echo "# One process over $x16 ($utts utterances), $(nproc) cores, $(nvidia-smi -L 2>/dev/null | head -1)" >"$md"
echo >>"$md"
rm -f "$out/onepass-times.txt"
echo "| model | run | wall s | notes |" >>"$md"
echo "|---|---|---:|---|" >>"$md"
row() { echo "| $1 | $2 | $3 | $4 |" >>"$md"; }

export KALDI_BUNDLE=$kb GPU_BIN=$gpu_bin
for m in ${MODELS:-tri1 tri2}; do
  d=$exp/$m
  [ -f "$d/final.mdl" ] || { row "$m" "missing $d/final.mdl" "" ""; continue; }
  cmvn_opts=$(cat "$d/cmvn_opts" 2>/dev/null || true)
  feats="ark,s,cs:apply-cmvn $cmvn_opts --utt2spk=ark:$x16/utt2spk scp:$x16/cmvn.scp scp:$x16/feats.scp ark:- |"
  if [ -f "$d/final.mat" ]; then
    feats="$feats splice-feats $(cat "$d/splice_opts" 2>/dev/null) ark:- ark:- | transform-feats $d/final.mat ark:- ark:- |"
  else
    feats="$feats add-deltas $(cat "$d/delta_opts" 2>/dev/null) ark:- ark:- |"
  fi
  g=/tmp/onepass-$m.fsts
  t0=$(now)
  (export PATH=$gpu_bin:$kb/bin:$PATH
   compile-train-graphs --read-disambig-syms=data/lang/phones/disambig.int "$d/tree" "$d/final.mdl" \
     data/lang/L.fst "ark:utils/sym2int.pl --map-oov $(cat data/lang/oov.int) -f 2- data/lang/words.txt $x16/text|" \
     "ark:$g") 2>"$out/onepass-$m-graphs.log"
  t1=$(now)
  row "$m" "our compile-train-graphs, one process" "$(dt "$t0" "$t1")" "$(du -m "$g" | cut -f1) MB of graphs"
  o="--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40 --careful=false"
  one() {  # name, env..., program args
    local n=$1; shift
    local a; a=$(now)
    env KALDI_GPU_SERVICE=no "$@" 2>"$out/onepass-$m-$n.log"; local rc=$?
    local b; b=$(now)
    row "$m" "$n" "$(dt "$a" "$b")" "exit $rc"
    grep -h 'Time:' "$out/onepass-$m-$n.log" | sed "s/^[^ ]* ([^ ]*) /$m $n: /" >>"$out/onepass-times.txt"
  }
  one align-acc "$gpu_bin/gmm-align-acc-compiled" --use-gpu=${USE_GPU:-yes} --verbose=1 $o "$d/final.mdl" "ark:$g" "$feats" ark:/tmp/onepass-$m.ali /tmp/onepass-$m.acc
  one align-acc-feat1 KALDI_GPU_FEATS_THREADS=1 "$gpu_bin/gmm-align-acc-compiled" --use-gpu=${USE_GPU:-yes} --verbose=1 $o "$d/final.mdl" "ark:$g" "$feats" ark:/tmp/onepass-$m-1.ali /tmp/onepass-$m-1.acc
  cmp -s /tmp/onepass-$m.ali /tmp/onepass-$m-1.ali && cmp -s /tmp/onepass-$m.acc /tmp/onepass-$m-1.acc &&
    row "$m" "outputs, default vs 1 feature thread" "" "identical" || row "$m" "outputs, default vs 1 feature thread" "" "DIFFERENT"
  if [ "${ACC_SPLIT:-0}" = 1 ]; then  # the accumulator's own time split (VLOG[2])
    one align-acc-v2 "$gpu_bin/gmm-align-acc-compiled" --use-gpu=${USE_GPU:-yes} --verbose=2 $o "$d/final.mdl" "ark:$g" "$feats" ark:/dev/null /dev/null
    grep -h 'GPU accumulator:' "$out/onepass-$m-align-acc-v2.log" | sed "s/^[^ ]* ([^ ]*) /$m align-acc-v2: /" >>"$out/onepass-times.txt"
    # gmm-acc-stats-ali alone on the same alignments (no aligner sharing the device)
    one acc-alone-v2 "$gpu_bin/gmm-acc-stats-ali" --use-gpu=${USE_GPU:-yes} --verbose=2 "$d/final.mdl" "$feats" ark:/tmp/onepass-$m.ali /tmp/onepass-$m-alone.acc
    grep -h 'GPU accumulator:' "$out/onepass-$m-acc-alone-v2.log" | sed "s/^[^ ]* ([^ ]*) /$m acc-alone-v2: /" >>"$out/onepass-times.txt"
    cmp -s /tmp/onepass-$m.acc /tmp/onepass-$m-alone.acc && row "$m" "stats, gmm-acc-stats-ali vs one pass" "" "identical" ||
      row "$m" "stats, gmm-acc-stats-ali vs one pass" "" "DIFFERENT"
  fi
  i=0
  for ev in ${ACC_ENVS:-}; do  # align + accumulate again under each environment (a,b: both)
    i=$((i + 1))
    one "align-acc-env$i" $(echo "$ev" | tr , ' ') "$gpu_bin/gmm-align-acc-compiled" --use-gpu=${USE_GPU:-yes} --verbose=1 $o "$d/final.mdl" "ark:$g" "$feats" ark:/tmp/onepass-$m-e.ali /tmp/onepass-$m-e.acc
    cmp -s /tmp/onepass-$m.ali /tmp/onepass-$m-e.ali && cmp -s /tmp/onepass-$m.acc /tmp/onepass-$m-e.acc &&
      row "$m" "align-acc-env$i = $ev" "" "outputs identical" || row "$m" "align-acc-env$i = $ev" "" "outputs DIFFERENT"
  done
  one align "$gpu_bin/gmm-align-compiled" --use-gpu=${USE_GPU:-yes} --verbose=1 $o "$d/final.mdl" "ark:$g" "$feats" ark:/tmp/onepass-$m-a.ali
  cmp -s /tmp/onepass-$m.ali /tmp/onepass-$m-a.ali && row "$m" "alignments, align-acc vs align" "" "identical" ||
    row "$m" "alignments, align-acc vs align" "" "DIFFERENT"
  for t in ${ALIGN_FEAT_THREADS:-}; do  # the feature chain's thread count, alignment alone
    one align-feat$t KALDI_GPU_FEATS_THREADS=$t "$gpu_bin/gmm-align-compiled" --use-gpu=${USE_GPU:-yes} --verbose=1 $o "$d/final.mdl" "ark:$g" "$feats" ark:/tmp/onepass-$m-t.ali
    cmp -s /tmp/onepass-$m.ali /tmp/onepass-$m-t.ali || row "$m" "alignments with $t feature threads" "" "DIFFERENT"
  done
  # The recipe way on the same 99 h: align_si --nj N (graphs compiled per job).
  for side in ours kaldi; do
    [ "$side" = kaldi ] && [ "${KALDI_SIDE:-true}" != true ] && continue
    ko=false; [ "$side" = kaldi ] && ko=true
    rm -rf "exp_onepass/${m}_ali_$side"; mkdir -p exp_onepass
    a=$(now)
    (export KALDI_ONLY=$ko; . "$top/egs/synth/s5/path.sh" &&
     steps/align_si.sh --nj "$nj" --cmd run.pl "$x16" data/lang "$d" "exp_onepass/${m}_ali_$side") \
      >"$out/onepass-$m-alisi-$side.log" 2>&1; rc=$?
    b=$(now)
    row "$m" "steps/align_si.sh --nj $nj, $side" "$(dt "$a" "$b")" "exit $rc"
  done
  if [ -x "${TOOLS:-$top/build/tools}/ali-compare" ] && [ -d "exp_onepass/${m}_ali_kaldi" ]; then
    r=$("${TOOLS:-$top/build/tools}/ali-compare" --print-args=false \
          "ark:gunzip -c $(ls exp_onepass/${m}_ali_kaldi/ali.*.gz | tr '\n' ' ')|" ark:/tmp/onepass-$m.ali 2>/dev/null |
        awk '$1 == "frames-compared" { f = $2 } $1 == "frames-equal" { e = $2 } $1 == "percent-equal" { p = $2 }
             END { printf "%d of %d frames (%s%%)", e, f, p }')
    row "$m" "one process vs Kaldi's align_si" "" "$r"
  fi
  rm -f "$g" /tmp/onepass-$m*.ali /tmp/onepass-$m*.acc
done
{ echo; echo "Time splits (--verbose=1):"; echo; sed 's/^/    /' "$out/onepass-times.txt" 2>/dev/null; } >>"$md"
cat "$md"
