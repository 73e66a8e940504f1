#!/bin/bash
# The one-process trainer on a GPU host, in one device call: stock Kaldi's
# steps/train_mono.sh and train_deltas.sh against steps-gpu/'s (same
# machine hold, same inputs: --nj 16, data/train_x4, train_mono on its 1500
# shortest utterances as egs/synth/s5/run.sh does, train_deltas 1500 15000
# from Kaldi's own mono_ali; ours with every drop-in of the pack first on
# PATH, as after tools/enable-recipe.sh), wall times, ratios and whether the models
# and alignments are the same bytes; then one training iteration over ~1000 h of
# replicated data once resident (gmm-train-gpu --dev-replicate, an
# accumulation-and-update iteration, then a realigning one as far as the time
# left allows). Our trainer runs at --verbose=1: summary.md quotes its own
# split of the time (graphs: compiling and the fsts.JOB.gz writers;
# realignment and the aligner's phases; the GPU accumulation's set-up, sort,
# upload, device wait, host likelihoods, fetch) and, when the pack has it,
# tools/blas-order-check's comparison with the bundle's OpenBLAS on this core.
#
#   dev/device/trainer-device.sh [--nj N] [--train DIR] [--replicate R]
#                                [--budget SECONDS] [--steps "mono deltas variants big"]
#                                [--kaldi-exp EXP]
#
# Step variants (after deltas): our train_deltas again with the graphs
# compiled before the first iteration (KALDI_GPU_DEV_TRAIN_GRAPHS_BESIDE=0),
# with the compilation beside the iterations at their priority (KALDI_GPU_DEV_TRAIN_GRAPHS_NICE=0),
# with the graphs started at the script's "go" instead of its first model
# (KALDI_GPU_DEV_TRAIN_GRAPHS_AT_MODEL=0), and with 8 accumulators: the same
# build, the same hold, each change's share. Each train_deltas' log in
# summary.md is followed by its stages before the loop, step by step
# (dev/bench/tree-stage-split.sh: the logs' modification times).
#
# --kaldi-exp EXP (e.g. exp_kaldi, after `recipe-device.sh start --stages 1-3`
# in the same machine hold): stock Kaldi's side is not run again; its mono,
# mono_ali and tri1 and their wall times (EXP/stage_times) are taken from
# the recipe's Kaldi run in the same work directory.
#
# Inputs: the parts that dev/device/recipe-device.sh packs here and stashes
# there (the Kaldi bundle, the corpus, our stripped programs), unpacked by
# `recipe-device.sh prepare` into /tmp/recipe-device/work (skipped when
# already there). Every step stops before --budget seconds (default 520)
# from the start have passed, so the call returns its logs within a 9-minute
# limit; should the steps not fit one call, run `--steps "mono deltas"`, then
# `--steps big` (it starts from the first call's exp_trn/tri1_g while the
# machine stays warm). The replicated run may use a quarter of the device's
# memory (BIG_GPU_MEMORY, as KALDI_GPU_MEMORY). Writes into $OUT:
# summary.md (the table), progress.log, logs.tgz (every experiment's log/),
# outs.tgz (the steps' outputs, *.out), env.txt: few files, as a device call
# brings back at most 8.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
base=${RECIPE_DEVICE_BASE:-/tmp/recipe-device}  # (another for a dry run elsewhere)
nj=16 train=data/train_x4 replicate=40 budget=520 steps="mono deltas big" kaldi_exp=""
while [ $# -gt 0 ]; do
  case $1 in
    --nj) nj=$2 ;; --train) train=$2 ;; --replicate) replicate=$2 ;; --budget) budget=$2 ;;
    --steps) steps=$2 ;; --kaldi-exp) kaldi_exp=$2 ;;
    *) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 1 ;;
  esac
  shift 2
done
OUT=${OUT:-/tmp/trainer-device-out}; mkdir -p "$OUT"
out=$(cd "$OUT" && pwd)
start=$SECONDS
p=$out/progress.log
say() { echo "$(date -u +%T) +$((SECONDS - start))s $*" | tee -a "$p"; }
left() { echo $((budget - (SECONDS - start))); }
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nproc; free -g | head -2; } >"$out/env.txt" 2>&1

w=$base/work
if [ ! -f "$w/synth-s5/.unpacked" ] || [ ! -x "$w/kaldi/kb/bin/gmm-est" ] || [ ! -x "$base/in/gmmbin-gpu/gmm-train-gpu" ]; then
  say "unpacking the stashed parts (recipe-device.sh prepare)"
  "$top/dev/device/recipe-device.sh" prepare >>"$p" 2>&1 || { say "prepare failed"; exit 1; }
fi
gpu_bin=$base/in/gmmbin-gpu
[ -x "$gpu_bin/gmm-train-gpu" ] || { say "no $gpu_bin/gmm-train-gpu (pack after make all)"; exit 1; }
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export KALDI_BUNDLE=$w/kaldi/kb
cd "$w/synth-s5" || exit 1
. ./path.sh
# Kaldi's programs for the stock scripts; ours through steps-gpu (the
# trainer after Kaldi's on PATH, the drop-ins through GPU_BIN below), at
# --verbose=1 so that its log splits the time (graphs, realignment,
# accumulation on the device), and its wall time at the end of the log: the
# stage's time outside the trainer is the script's (its tree building, the
# diagnostics after the loop).
mkdir -p "$base/trainer-bin" && rm -f "$base/trainer-bin/gmm-train-gpu" &&
  printf '#!/bin/sh\nt0=$(date +%%s.%%N)\n"%s" --verbose=1 "$@"\nr=$?\necho "trainer wall time: $(awk -v a="$t0" -v b="$(date +%%s.%%N)" '"'"'BEGIN { printf "%%.2f", b - a }'"'"') s" >&2\nexit $r\n' \
    "$gpu_bin/gmm-train-gpu" >"$base/trainer-bin/gmm-train-gpu" &&
  chmod +x "$base/trainer-bin/gmm-train-gpu" || exit 1
export PATH=$base/trainer-bin:$PATH
# Our train_deltas as a recipe after tools/enable-recipe.sh runs it: every
# drop-in of the pack (the tree building's acc-tree-stats, sum-tree-stats,
# cluster-phones and build-tree among them) first on its PATH. The steps
# scripts source path.sh, which puts Kaldi's programs ahead of an exported
# PATH and GPU_BIN ahead of those, so the drop-ins go in through GPU_BIN
# (ours_env); the trainer itself stays trainer-bin's timing wrapper. Kaldi's
# side never sees them.
rm -rf "$base/ours-bin" && mkdir -p "$base/ours-bin" || exit 1
dropins=""
for prog in "$gpu_bin"/*; do
  n=${prog##*/}
  [ -f "$prog" ] && [ -x "$prog" ] && [ "$n" != gmm-train-gpu ] || continue
  ln -s "$prog" "$base/ours-bin/" && dropins="$dropins $n"
done
ours_env=(env PATH="$base/ours-bin:$PATH" GPU_BIN="$base/ours-bin")
gpu=$top/steps-gpu
e=exp_trn
mkdir -p $e
say "trainer-device: --nj $nj --train $train --replicate $replicate --budget $budget; $(nvidia-smi -L 2>/dev/null | head -1)"
say "rounding: $("$gpu_bin/kaldi-gpu-service" --print-rounding 2>/dev/null | cut -f1,3)"
# Our OpenBLAS orders (gmm-est's sums among them) against the Kaldi's library
# on this host's core, when the pack has the checker.
blas_check=""
if [ -x "$base/in/tools/blas-order-check" ]; then
  blas_check=$("$base/in/tools/blas-order-check" --quick "$w/kaldi/kb/lib/libopenblas.so.0" 2>&1 |
               grep -E '^(core|profile|[a-z]+ mismatches)' | paste -sd';' -)
  say "blas-order-check: $blas_check"
fi

# timed NAME COMMAND...: wall seconds into $e/NAME.time, output in $e/NAME.out
declare -A secs
timed() {
  local name=$1; shift
  local l; l=$(left)
  if [ "$l" -le 10 ]; then say "$name: not run (budget spent)"; return 1; fi
  say "$name: start ($l s left)"
  local t0 t1 r
  t0=$(date +%s.%N)
  timeout "$l" "$@" >"$e/$name.out" 2>&1
  r=$?
  t1=$(date +%s.%N)
  secs[$name]=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  say "$name: exit $r in ${secs[$name]} s"
  # a failed or stopped side has no time (the table says why)
  [ $r -eq 0 ] || { secs[$name]="exit $r after ${secs[$name]} s"; tail -n 5 "$e/$name.out" >>"$p"; return 1; }
}
same() {  # DIR_K DIR_G: the same final.mdl and alignments?
  local f s="final.mdl identical"
  [ -f "$1/final.mdl" ] && [ -f "$2/final.mdl" ] || { echo "not both finished"; return; }
  cmp -s "$1/final.mdl" "$2/final.mdl" || s="final.mdl DIFFERS"
  for f in "$1"/ali.*.gz; do
    cmp -s <(gunzip -c "$f") <(gunzip -c "$2/${f##*/}") || { s="$s, ${f##*/} differs"; break; }
  done
  echo "$s"
}
ratio() { awk -v k="${secs[$1]:-}" -v g="${secs[$2]:-}" 'BEGIN { if (k ~ /^[0-9.]+$/ && g ~ /^[0-9.]+$/ && g > 0) printf "%.1f×", k / g; else print "-" }'; }
rows=()
# The trainer's own account of its time (its log at --verbose=1).
timing_lines() {
  grep -hE "Start-up:|Resident|resident on the GPU|Graphs:|Iteration [0-9]+:|Realignment:|GPU accumulation:|Trained in|Estimation, all updates:|Alignments:|trainer wall time" "$1" |
    sed -E 's/^(LOG|VLOG\[[0-9]\]) \([^ ]*\) //'
}

nmono=$(wc -l <"$train/utt2spk"); [ "$nmono" -gt 1500 ] && nmono=1500
mono_data=${train}_${nmono}short
if [[ " $steps " == *" mono "* ]] || [[ " $steps " == *" deltas "* ]]; then
  if [ ! -f "$mono_data/feats.scp" ]; then
    rm -rf "$mono_data"
    utils/subset_data_dir.sh --shortest "$train" "$nmono" "$mono_data" >>"$p" 2>&1 ||
      { say "subset_data_dir.sh failed"; exit 1; }
  fi
fi
# The data split once before either side is timed: each script splits the
# data when the split is missing, so whichever side ran first paid for
# split_data.sh (our train_mono, run first, did in the earlier measurements).
for sd in "$mono_data" "$train"; do
  [ -f "$sd/feats.scp" ] || continue
  [[ -d $sd/split$nj && $sd/feats.scp -ot $sd/split$nj ]] ||
    utils/split_data.sh "$sd" "$nj" >>"$p" 2>&1 || { say "split_data.sh $sd $nj failed"; exit 1; }
done
# Kaldi's side from the recipe's run: links and its stage times.
if [ -n "$kaldi_exp" ]; then
  [ -f "$kaldi_exp/mono/final.mdl" ] && [ -f "$kaldi_exp/mono_ali/ali.1.gz" ] && [ -f "$kaldi_exp/tri1/final.mdl" ] ||
    { say "--kaldi-exp $kaldi_exp: no mono, mono_ali and tri1 there"; exit 1; }
  rm -rf $e/mono_k $e/mono_ali $e/tri1_k
  ln -s "$PWD/$kaldi_exp/mono" $e/mono_k; ln -s "$PWD/$kaldi_exp/mono_ali" $e/mono_ali; ln -s "$PWD/$kaldi_exp/tri1" $e/tri1_k
  for pair in mono:mono_k mono_ali:mono_ali tri1:tri1_k; do
    secs[${pair#*:}]=$(awk -v n="${pair%:*}" '$1 == n { printf "%.1f", $2 }' "$kaldi_exp/stage_times")
  done
  say "Kaldi's side from $kaldi_exp: mono ${secs[mono_k]} s, mono_ali ${secs[mono_ali]} s, tri1 ${secs[tri1_k]} s"
fi
if [[ " $steps " == *" mono "* ]]; then
  rm -rf $e/mono_g
  [ -n "$kaldi_exp" ] || rm -rf $e/mono_k
  timed mono_g "${ours_env[@]}" "$gpu/train_mono.sh" --use-gpu yes --nj "$nj" "$mono_data" data/lang $e/mono_g
  [ -n "$kaldi_exp" ] || timed mono_k steps/train_mono.sh --nj "$nj" "$mono_data" data/lang $e/mono_k
  # ours once more (a 3 s run: how much one measurement varies)
  rm -rf $e/mono_g2
  timed mono_g2 "${ours_env[@]}" "$gpu/train_mono.sh" --use-gpu yes --nj "$nj" "$mono_data" data/lang $e/mono_g2
  rows+=("| train_mono ($mono_data) | ${secs[mono_k]:--} | ${secs[mono_g]:--} (again: ${secs[mono_g2]:--}) | $(ratio mono_k mono_g) | $(same $e/mono_k $e/mono_g) |")
fi
if [[ " $steps " == *" deltas "* ]]; then
  if [ ! -f $e/mono_ali/ali.1.gz ]; then
    [ -f $e/mono_k/final.mdl ] || timed mono_k steps/train_mono.sh --nj "$nj" "$mono_data" data/lang $e/mono_k
    timed mono_ali steps/align_si.sh --nj "$nj" "$train" data/lang $e/mono_k $e/mono_ali
  fi
  rm -rf $e/tri1_g
  [ -n "$kaldi_exp" ] || rm -rf $e/tri1_k
  timed tri1_g "${ours_env[@]}" "$gpu/train_deltas.sh" --use-gpu yes 1500 15000 "$train" data/lang $e/mono_ali $e/tri1_g
  [ -n "$kaldi_exp" ] || timed tri1_k steps/train_deltas.sh 1500 15000 "$train" data/lang $e/mono_ali $e/tri1_k
  rows+=("| train_deltas ($train) | ${secs[tri1_k]:--} | ${secs[tri1_g]:--} | $(ratio tri1_k tri1_g) | $(same $e/tri1_k $e/tri1_g) |")
fi
variant_dirs=()
if [[ " $steps " == *" variants "* ]] && [ -f $e/mono_ali/ali.1.gz ]; then
  for v in "first:KALDI_GPU_DEV_TRAIN_GRAPHS_BESIDE=0:" "nice0:KALDI_GPU_DEV_TRAIN_GRAPHS_NICE=0:" \
           "atgo:KALDI_GPU_DEV_TRAIN_GRAPHS_AT_MODEL=0:" "s8:KALDI_GPU_DEV_TRAIN_ACC_STREAMS=8:"; do
    IFS=: read -r vn venv vopt <<<"$v"
    rm -rf $e/tri1_$vn
    # shellcheck disable=SC2086
    timed tri1_$vn "${ours_env[@]}" $venv "$gpu/train_deltas.sh" --use-gpu yes $vopt 1500 15000 "$train" data/lang $e/mono_ali $e/tri1_$vn &&
      variant_dirs+=(tri1_$vn)
    rows+=("| train_deltas, $vn: $venv $vopt | ${secs[tri1_k]:--} | ${secs[tri1_$vn]:--} | $(ratio tri1_k tri1_$vn) | $(same $e/tri1_k $e/tri1_$vn) |")
  done
fi

# One iteration over replicated data: tri1_g's tree, final model and
# alignments, every utterance of $train $replicate times (the features and
# graphs stored once); the trainer logs each iteration's time.
big_lines=""
if [[ " $steps " == *" big "* ]] && [ -f $e/tri1_g/final.mdl ]; then
  b=$e/big
  rm -rf $b; mkdir -p $b/log
  cp $e/tri1_g/tree $e/tri1_g/phones.txt $e/tri1_g/num_jobs $b/ && cp -L $e/tri1_g/final.mdl $b/1.mdl &&
    cp $e/tri1_g/ali.*.gz $b/
  bnj=$(cat $b/num_jobs); sdata=$train/split$bnj
  ng=$(gmm-info --print-args=false $b/1.mdl | awk '/gaussians/ { print $NF }')
  oov=$(cat data/lang/oov.int)
  feats="ark,s,cs:apply-cmvn --utt2spk=ark:$sdata/JOB/utt2spk scp:$sdata/JOB/cmvn.scp scp:$sdata/JOB/feats.scp ark:- | add-deltas ark:- ark:- |"
  tv=(); [ -x /usr/bin/time ] && tv=(/usr/bin/time -v)
  # alone on the device: a quarter of it (the default budget is 2 GiB)
  timed big env KALDI_GPU_MEMORY="${BIG_GPU_MEMORY:-25%}" "${tv[@]}" "$gpu_bin/gmm-train-gpu" --verbose=1 --use-gpu=yes --nj="$bnj" --lang=data/lang --sdata="$sdata" \
    --feats="$feats" --text="ark:utils/sym2int.pl --map-oov $oov -f 2- data/lang/words.txt < $sdata/JOB/text |" \
    --start-iter=1 "--ali-in=ark:gunzip -c $b/ali.JOB.gz|" --start-gauss="$ng" --inc-gauss=0 \
    --num-iters=3 --realign-iters=2 --boost-silence=1.0 --silence-phones="$(cat data/lang/phones/optional_silence.csl)" \
    --dev-replicate="$replicate" $b
  big_lines=$(timing_lines $e/big.out)
  rss=$(awk -F': ' '/Maximum resident/ { printf "%.1f GiB", $2 / 1048576 }' $e/big.out)
fi

{
  echo "# steps-gpu trainer vs stock Kaldi ($(date -u +%F), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), $(nproc) cores)"
  echo
  echo "--nj $nj; rounding: $("$gpu_bin/kaldi-gpu-service" --print-rounding 2>/dev/null | cut -f3)"
  echo
  echo "| stage | stock Kaldi s | steps-gpu s | ratio | same bytes |"
  echo "|---|---:|---:|---:|---|"
  for r in "${rows[@]}"; do echo "$r"; done
  [ -n "${secs[mono_ali]:-}" ] && echo && echo "(Kaldi's align_si of mono, the input of both train_deltas: ${secs[mono_ali]} s)"
  echo && echo "Our train_deltas ran with the pack's drop-ins first on its PATH (GPU_BIN):${dropins:- none (not in the pack)}"
  [ -n "$blas_check" ] && echo && echo "blas-order-check (ours against the bundle's OpenBLAS on this core): $blas_check"
  for x in mono_g tri1_g ${variant_dirs[@]+"${variant_dirs[@]}"}; do
    [ -f $e/$x/log/train.log ] || continue
    echo
    echo "steps-gpu $x, the trainer's log (--verbose=1):"
    echo
    echo '```'
    timing_lines $e/$x/log/train.log
    case $x in tri1_*) "$top/dev/bench/tree-stage-split.sh" $e/$x | sed "s#$e/##" ;; esac
    echo '```'
  done
  for x in tri1_k; do  # the stock script's stages, for comparison
    [ -f $e/$x/log/build_tree.log ] && echo && "$top/dev/bench/tree-stage-split.sh" $e/$x | sed "s#$e/##"
  done
  if [ -n "$big_lines" ]; then
    echo
    echo "One process over $train × $replicate (gmm-train-gpu --dev-replicate=$replicate, GPU), ${secs[big]:-?} s in all, peak host memory ${rss:-?}:"
    echo
    echo '```'
    echo "$big_lines"
    echo '```'
  fi
} >"$out/summary.md"
# every log but the replicated run's per-job ones (a line per utterance: ~100 MB)
( { find $e -type d -name log ! -path "$e/big/log" -print0; find $e/big/log -name 'update.*' -print0; } |
    tar --null -czf "$out/logs.tgz" -T -; tar -C $e -czf "$out/outs.tgz" $(cd $e && ls *.out) ) 2>/dev/null
say "done"
cat "$out/summary.md"
