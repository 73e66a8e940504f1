#!/bin/bash
# The stock Kaldi GMM recipe on the synthetic corpus (../shared/recipe), with
# our programs first on PATH (nothing else changed), or all-Kaldi with
# --kaldi-only true. Stages (the commands of the corpus' README.md):
#    1 mono         utils/subset_data_dir.sh --shortest TRAIN N; steps/train_mono.sh
#    2 mono_ali     steps/align_si.sh            3 tri1      steps/train_deltas.sh 1500 15000
#    4 tri1_ali     steps/align_si.sh            5 tri2      steps/train_lda_mllt.sh 2000 20000
#    6 tri2_ali     steps/align_si.sh            7 tri3      steps/train_sat.sh 2500 25000
#    8 tri2_graph   utils/mkgraph.sh             9 tri2_decode  steps/decode.sh
#   10 tri3_graph   utils/mkgraph.sh            11 tri3_decode  steps/decode_fmllr.sh
#   12 results      best WER per decode dir -> EXP/results
# Writes EXP/stage_times ("stage wall-seconds" lines), EXP/run_info (host,
# GPU, where each program came from) and EXP/run.log (all output).
#
# Usage: egs/synth/s5/run.sh [options]
#   --nj N               parallel jobs (default 4; decoding uses at most #test speakers)
#   --train DIR          data/train (default) or data/train_x4, relative to the corpus dir
#   --exp DIR            experiment dir (default exp, or exp_kaldi with --kaldi-only true);
#                        relative to the corpus dir
#   --kaldi-only BOOL    true: stock Kaldi only, our programs off PATH (default false)
#   --stage N / --stop-stage N   first / last stage to run (default 1 / 12)
#   --work DIR           where the corpus lives as DIR/synth-s5, unpacked there if missing
#                        (default egs/synth/s5/work)
#   --corpus DIR         dir holding unpack.sh and synth-s5.tar.xz (default ../shared/recipe)
#   --kaldi-bundle P     kaldi-bin.tar.xz (unpacked to WORK/kaldi) or an unpacked bundle dir
#                        (default: $KALDI_BUNDLE, else $KALDI_ROOT, else ../shared/kaldi's tarball)
#   --gpu-bin DIR        our programs (default this repo's gmmbin-gpu)
#   --mono-utts N        utterances for train_mono, shortest first (default 1500)
#   --mono-opts "OPTS"   extra train_mono.sh options, e.g. "--num-iters 10"
#   --cmd CMD            how the steps scripts run their jobs: run.pl (default), or
#                        slurm.pl / queue.pl with the corpus' conf/slurm.conf / conf/queue.conf
#                        (docs/cluster.md)
# Two runs (e.g. Kaldi side, then ours) may share one corpus copy with
# different --exp dirs, one after the other: data/ (its split dirs, the mono
# subset) is shared and written on first use, so never run them at once.
# RECIPE_TIME_PROGRAMS=1 (environment): time every program call
# (dev/bench/time-shim.sh) and write EXP/prog_times.md, per stage and program;
# our programs also get --verbose=1 (their "Time: ..." split in the job logs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
. "$top/dev/device/recipe-env.sh"

nj=4 train=data/train exp="" kaldi_only=false stage=1 stop_stage=12
work=$here/work corpus=$SYNTH_CORPUS_DIR kaldi_bundle="" gpu_bin=$top/gmmbin-gpu
mono_utts=1500 mono_opts="" cmd=run.pl
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 1; }
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || { [ "$1" = --help ] || [ "$1" = -h ] || echo "run.sh: option $1 needs a value" >&2; usage; }
  case $1 in
    --nj) nj=$2 ;; --train) train=$2 ;; --exp) exp=$2 ;; --kaldi-only) kaldi_only=$2 ;;
    --stage) stage=$2 ;; --stop-stage) stop_stage=$2 ;; --work) work=$2 ;; --corpus) corpus=$2 ;;
    --kaldi-bundle) kaldi_bundle=$2 ;; --gpu-bin) gpu_bin=$2 ;; --mono-utts) mono_utts=$2 ;;
    --mono-opts) mono_opts=$2 ;; --cmd) cmd=$2 ;;
    *) echo "run.sh: unknown option $1" >&2; usage ;;
  esac
  shift 2
done
case $kaldi_only in true|false) ;; *) echo "run.sh: --kaldi-only must be true or false" >&2; exit 1 ;; esac
die() { echo "run.sh: $*" >&2; exit 1; }
mkdir -p "$work"; work=$(cd "$work" && pwd)

# ---- Kaldi: a bundle (unpacked once under WORK/kaldi) or a built tree ----
[ -n "$kaldi_bundle" ] || [ -z "${KALDI_BUNDLE:-}" ] || kaldi_bundle=$KALDI_BUNDLE
if [ -z "$kaldi_bundle" ] && [ -n "${KALDI_ROOT:-}" ]; then
  [ -x "$KALDI_ROOT/src/gmmbin/gmm-est" ] || die "KALDI_ROOT=$KALDI_ROOT has no src/gmmbin/gmm-est"
  unset KALDI_BUNDLE; export KALDI_ROOT; kaldi_from="KALDI_ROOT=$KALDI_ROOT"
else
  [ -n "$kaldi_bundle" ] || kaldi_bundle=$KALDI_BUNDLE_TAR
  [ -n "$kaldi_bundle" ] || die "no Kaldi: give --kaldi-bundle, or set KALDI_BUNDLE or KALDI_ROOT"
  if [ -f "$kaldi_bundle" ]; then
    if [ ! -x "$work/kaldi/kb/bin/gmm-est" ]; then
      echo "run.sh: unpacking $kaldi_bundle into $work/kaldi"
      rm -rf "$work/kaldi.tmp"; mkdir -p "$work/kaldi.tmp"
      tar -C "$work/kaldi.tmp" -xJf "$kaldi_bundle"
      rm -rf "$work/kaldi"; mv "$work/kaldi.tmp" "$work/kaldi"
    fi
    kaldi_from="$kaldi_bundle (unpacked in $work/kaldi/kb)"
    kaldi_bundle=$work/kaldi/kb
  else
    kaldi_from=$kaldi_bundle
  fi
  [ -x "$kaldi_bundle/bin/gmm-est" ] || die "$kaldi_bundle is not a Kaldi bundle (no bin/gmm-est)"
  KALDI_BUNDLE=$(cd "$kaldi_bundle" && pwd); export KALDI_BUNDLE
fi

# ---- the corpus: WORK/synth-s5, unpacked once ----
c=$work/synth-s5
if [ ! -f "$c/.unpacked" ]; then
  [ ! -e "$c" ] || die "$c exists but was not fully unpacked; remove it"
  [ -x "$corpus/unpack.sh" ] || die "no corpus: --corpus DIR must hold unpack.sh and synth-s5.tar.xz"
  echo "run.sh: unpacking the corpus into $c"
  "$corpus/unpack.sh" "$work" >/dev/null
  touch "$c/.unpacked"
fi
cd "$c"
[ -n "$exp" ] || { exp=exp; [ $kaldi_only = true ] && exp=exp_kaldi; }
mkdir -p "$exp"; exp=$(cd "$exp" && pwd)
[ -f "$train/feats.scp" ] || die "no $c/$train/feats.scp"

# ---- PATH: Kaldi, then (unless --kaldi-only) our programs first ----
export KALDI_ONLY=$kaldi_only
if [ $kaldi_only = false ]; then
  [ -x "$gpu_bin/gmm-acc-stats-ali" ] || die "no $gpu_bin/gmm-acc-stats-ali (build with make, or give --gpu-bin)"
  GPU_BIN=$(cd "$gpu_bin" && pwd); export GPU_BIN
fi
. "$here/path.sh"
ours="gmm-acc-stats-ali gmm-align-compiled align-equal-compiled gmm-est gmm-sum-accs"
for p in $ours; do
  w=$(command -v "$p") || die "$p not on PATH"
  if [ $kaldi_only = true ]; then
    case $w in "$KALDI_BUNDLE"*|"${KALDI_ROOT:-/nonexistent}"*) ;; *) die "--kaldi-only, but $p is $w" ;; esac
  else
    [ "$w" = "$GPU_BIN/$p" ] || die "$p is $w, not ours ($GPU_BIN)"
  fi
done

{
  echo "date: $(date -u '+%F %T UTC')"
  echo "host: $(uname -n) ($(uname -sr))"
  echo "nproc: $(nproc)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //')"
  echo "gpu: $( (nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true) | paste -sd';' -)"
  echo "kaldi: $kaldi_from"
  echo "kaldi-only: $kaldi_only"
  echo "gpu-bin: ${GPU_BIN:-}"
  # the rounding our programs choose for this PATH's Kaldi (nothing set: its
  # OpenBLAS core; KALDI_GPU_BLAS_PROFILE overrides)
  [ $kaldi_only = true ] || echo "rounding: $("$GPU_BIN/kaldi-gpu-service" --print-rounding 2>/dev/null | tr '\t' ' ')"
  echo "options: --nj $nj --train $train --mono-utts $mono_utts --mono-opts '$mono_opts' --stage $stage --stop-stage $stop_stage --cmd '$cmd'"
  for p in $ours gmm-align-acc-compiled gmm-init-mono compile-train-graphs acc-tree-stats \
           gmm-latgen-faster gmm-est-fmllr fstcomposecontext; do
    echo "which $p: $(command -v "$p" || echo '-')"
  done
} >"$exp/run_info"
sed 's/^/run.sh: /' "$exp/run_info"
# Profiling (dev/bench/time-shim.sh): every program of every stage timed into
# EXP/prog_times; the report is EXP/prog_times.md. Costs a bash start per call.
if [ "${RECIPE_TIME_PROGRAMS:-0}" = 1 ]; then
  shim_dirs="${KALDI_BUNDLE:+$KALDI_BUNDLE/bin}"
  [ -n "${KALDI_BUNDLE:-}" ] || shim_dirs="$KALDI_ROOT/src/bin $KALDI_ROOT/src/fstbin $KALDI_ROOT/src/gmmbin $KALDI_ROOT/src/featbin $KALDI_ROOT/src/latbin"
  [ $kaldi_only = true ] || shim_dirs="$shim_dirs $GPU_BIN"
  rm -rf "$exp/time-shim"
  # shellcheck disable=SC2086  # a list of dirs
  TIME_SHIM_VERBOSE_DIR=${GPU_BIN:-} "$top/dev/bench/time-shim.sh" make "$exp/time-shim" "$exp/prog_times" $shim_dirs
  # The steps scripts source path.sh again, which puts GPU_BIN first: so
  # the shims go there (they run the real programs by absolute path).
  GPU_BIN=$exp/time-shim; export GPU_BIN
  export PATH=$exp/time-shim:$PATH
  echo "run.sh: timing every program into $exp/prog_times"
fi

# ---- stages ----
log=$exp/run.log
now() { date +%s.%N; }
n=0
run_stage() {  # name command...  (runs if its number is in [stage, stop_stage])
  local name=$1; shift
  n=$((n + 1))
  [ $n -ge "$stage" ] && [ $n -le "$stop_stage" ] || return 0
  echo "run.sh: stage $n $name ($(date -u +%T))" | tee -a "$log"
  local t0 t1 s
  t0=$(now)
  if ! "$@" >>"$log" 2>&1; then
    tail -n 20 "$log" >&2; die "stage $n $name failed (all output in $log)"
  fi
  t1=$(now)
  s=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')
  { grep -v "^$name " "$exp/stage_spans" 2>/dev/null || true; echo "$name $t0 $t1"; } >"$exp/stage_spans.new"
  mv "$exp/stage_spans.new" "$exp/stage_spans"
  { grep -v "^$name " "$exp/stage_times" 2>/dev/null || true; echo "$name $s"; } >"$exp/stage_times.new"
  mv "$exp/stage_times.new" "$exp/stage_times"
  echo "run.sh: stage $n $name done in $s s" | tee -a "$log"
}
mono_data=${train}_${mono_utts}short
mono() {
  if [ ! -f "$mono_data/feats.scp" ]; then
    rm -rf "$mono_data.tmp"
    utils/subset_data_dir.sh --shortest "$train" "$mono_utts" "$mono_data.tmp"
    mv "$mono_data.tmp" "$mono_data"
  fi
  # shellcheck disable=SC2086  # mono_opts is a list of options
  steps/train_mono.sh $mono_opts --nj "$nj" --cmd "$cmd" "$mono_data" data/lang "$exp/mono"
}
ntest=$(wc -l <data/test/spk2utt)  # decoding splits data/test per speaker
njd=$((nj < ntest ? nj : ntest))
results() {
  local d
  : >"$exp/results"
  for d in "$exp"/*/decode*; do
    [ -d "$d" ] || continue
    echo "${d#"$exp"/} $(grep -h WER "$d"/wer_* | utils/best_wer.sh)" >>"$exp/results"
  done
  cat "$exp/results"
}
run_stage mono mono
run_stage mono_ali steps/align_si.sh --nj "$nj" --cmd "$cmd" "$train" data/lang "$exp/mono" "$exp/mono_ali"
run_stage tri1 steps/train_deltas.sh --cmd "$cmd" 1500 15000 "$train" data/lang "$exp/mono_ali" "$exp/tri1"
run_stage tri1_ali steps/align_si.sh --nj "$nj" --cmd "$cmd" "$train" data/lang "$exp/tri1" "$exp/tri1_ali"
run_stage tri2 steps/train_lda_mllt.sh --cmd "$cmd" --splice-opts "--left-context=3 --right-context=3" \
  2000 20000 "$train" data/lang "$exp/tri1_ali" "$exp/tri2"
run_stage tri2_ali steps/align_si.sh --nj "$nj" --cmd "$cmd" "$train" data/lang "$exp/tri2" "$exp/tri2_ali"
run_stage tri3 steps/train_sat.sh --cmd "$cmd" 2500 25000 "$train" data/lang "$exp/tri2_ali" "$exp/tri3"
run_stage tri2_graph utils/mkgraph.sh data/lang_test "$exp/tri2" "$exp/tri2/graph"
run_stage tri2_decode steps/decode.sh --nj "$njd" --cmd "$cmd" "$exp/tri2/graph" data/test "$exp/tri2/decode"
run_stage tri3_graph utils/mkgraph.sh data/lang_test "$exp/tri3" "$exp/tri3/graph"
run_stage tri3_decode steps/decode_fmllr.sh --nj "$njd" --cmd "$cmd" "$exp/tri3/graph" data/test "$exp/tri3/decode"
run_stage results results
[ $stop_stage -lt 12 ] || sed 's/^/run.sh: WER /' "$exp/results"
if [ "${RECIPE_TIME_PROGRAMS:-0}" = 1 ] && [ -f "$exp/prog_times" ]; then
  "$top/dev/bench/time-shim.sh" report "$exp/prog_times" "$exp/stage_spans" >"$exp/prog_times.md" || true
  echo "run.sh: where the time went: $exp/prog_times.md"
fi
echo "run.sh: done; $exp/stage_times:"
sed 's/^/  /' "$exp/stage_times" 2>/dev/null || true
