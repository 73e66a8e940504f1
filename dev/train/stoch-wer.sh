#!/bin/bash
# Stochastic vs full-batch training on the synth-s5 corpus: WER on data/test
# of train_deltas (tri1, 1500 leaves, 15000 Gaussians, on data/train from
# the monophone alignments) trained by steps-gpu/train_deltas.sh in full
# batch (34 passes) and in stochastic mode for each batch size and number
# of passes. Every variant starts from the same tree, first model and
# converted alignments (made once), and is decoded with the full-batch
# system's graph (the tree and the transition model are the same).
#
#   dev/train/stoch-wer.sh [--nj N] [--batches "0.05 0.1 0.25"] [--passes "4 8"]
#                          [--memory F] [--level speaker|utterance] [--seeds "777"]
#                          [--full-passes "4 8"] WORK
# --full-passes: also full-batch systems of that many passes, the stock
# schedule scaled down (num_iters P+1, max_iter_inc and realign_iters
# 10 20 30 scaled by P/34): the control for the stochastic ones.
#
# WORK: a work directory (the corpus is unpacked there on first use; KALDI_BUNDLE
# or KALDI_ROOT as for the corpus's path.sh). Results: WORK/synth-s5/stoch-wer.txt
# (one line per system: batch, passes, WER line of utils/best_wer.sh).
# Re-running skips what is done. Extra trainer options: TRAINER_OPTS.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
nj=2 batches="0.05 0.1 0.25" passes="4 8" memory=1 level=speaker seeds=777 full_passes=""
while [ $# -gt 1 ]; do
  case $1 in
    --nj) nj=$2; shift 2;; --batches) batches=$2; shift 2;; --passes) passes=$2; shift 2;;
    --memory) memory=$2; shift 2;; --level) level=$2; shift 2;; --seeds) seeds=$2; shift 2;;
    --full-passes) full_passes=$2; shift 2;;
    *) echo "unknown option $1"; exit 1;;
  esac
done
[ $# -eq 1 ] || { sed -n '2,/^set -u/p' "$0" | sed '$d'; exit 1; }
work=$1
. "$top/dev/device/recipe-env.sh"
mkdir -p "$work"
[ -d "$work/synth-s5" ] || "$SYNTH_CORPUS_DIR/unpack.sh" "$work" >/dev/null || exit 1
cd "$work/synth-s5" || exit 1
mkdir -p exp
. ./path.sh
gpu=$top/steps-gpu
step() { echo "== $(date +%T) $*"; }
done_file() { [ -f "$1" ]; }

if ! done_file exp/mono/final.mdl; then
  step mono
  utils/subset_data_dir.sh --shortest data/train 1500 data/train_1500 >/dev/null 2>&1
  "$gpu/train_mono.sh" --nj "$nj" data/train_1500 data/lang exp/mono >exp/mono.out 2>&1 || exit 1
fi
if ! done_file exp/mono_ali/ali.1.gz; then
  step mono_ali
  steps/align_si.sh --nj "$nj" data/train data/lang exp/mono exp/mono_ali >exp/mono_ali.out 2>&1 || exit 1
fi
if ! done_file exp/tri1_init/1.mdl; then
  step tri1_init: tree, first model, converted alignments
  "$gpu/train_deltas.sh" --num-iters 1 1500 15000 data/train data/lang exp/mono_ali exp/tri1_init \
    >exp/tri1_init.out 2>&1 || exit 1
fi
# train NAME OPTS...: a tri1 system from the template
train() {
  local name=$1; shift
  done_file exp/$name/final.mdl && return 0
  step "train $name $*"
  rm -rf exp/$name && cp -r exp/tri1_init exp/$name && rm -f exp/$name/final.* exp/$name/log/*
  /usr/bin/time -f "%e s wall" -o exp/$name.time \
    "$gpu/train_deltas.sh" --stage 0 ${TRAINER_OPTS:-} "$@" 1500 15000 data/train data/lang \
    exp/mono_ali exp/$name >exp/$name.out 2>&1 || { tail -n 5 exp/$name.out; return 1; }
}
decode() {
  local name=$1
  ls exp/$name/decode/wer_* >/dev/null 2>&1 && return 0
  step "decode $name"
  steps/decode.sh --nj "$nj" exp/tri1_full/graph data/test exp/$name/decode >exp/$name.decode.out 2>&1 ||
    { tail -n 5 exp/$name.decode.out; return 1; }
}
wer() { grep -h WER exp/$1/decode/wer_* | utils/best_wer.sh; }

train tri1_full || exit 1
if ! done_file exp/tri1_full/graph/HCLG.fst; then
  step mkgraph
  utils/mkgraph.sh data/lang_test exp/tri1_full exp/tri1_full/graph >exp/mkgraph.out 2>&1 || exit 1
fi
decode tri1_full || exit 1
out=stoch-wer.txt
[ -f $out ] || {
  echo "# system batch passes train_seconds WER (data/test, best LM weight)"
  echo "tri1_full full 34 $(cut -d' ' -f1 exp/tri1_full.time) $(wer tri1_full)"
} >$out
for p in $full_passes; do
  name=tri1_full_p$p
  grep -q "^$name " $out && continue
  ri=$(awk -v p="$p" 'BEGIN { for (i = 10; i <= 30; i += 10) { r = int(i * p / 34 + 0.5); if (r < 1) r = 1; printf "%s%d", (i > 10 ? " " : ""), r } }')
  train $name --num-iters $((p + 1)) --max-iter-inc $(( (25 * p + 17) / 34 )) --realign-iters "$ri" &&
    decode $name && echo "$name full $p $(cut -d' ' -f1 exp/$name.time) $(wer $name)" >>$out
done
for seed in $seeds; do
  for b in $batches; do
    for p in $passes; do
      name=tri1_s${b}_p${p}_m${memory}_${level}_r$seed
      grep -q "^$name " $out && continue
      train $name --stochastic-batch "$b" --stochastic-passes "$p" --stochastic-memory "$memory" \
        --stochastic-level "$level" --stochastic-seed "$seed" && decode $name &&
        echo "$name $b $p $(cut -d' ' -f1 exp/$name.time) $(wer $name)" >>$out
    done
  done
done
cat $out
