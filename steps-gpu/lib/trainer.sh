# Sourced by steps-gpu/*.sh (bash): finds gmm-train-gpu and sets the options
# every trainer takes. The program is looked for on PATH (path.sh after
# tools/enable-recipe.sh, or an install), then beside these scripts in the
# source tree (steps-gpu/../gmmbin-gpu).
gpu_trainer=$(command -v gmm-train-gpu 2>/dev/null)
if [ -z "$gpu_trainer" ]; then
  _t=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../gmmbin-gpu/gmm-train-gpu
  [ -x "$_t" ] && gpu_trainer=$(readlink -f "$_t")
  unset _t
fi
if [ -z "$gpu_trainer" ]; then
  echo "$0: gmm-train-gpu not found (on PATH or beside steps-gpu/ in the kaldi-gpu-align tree)" >&2
  exit 1
fi

# gpu_trainer_opts: the options of the GPU trainer that the scripts add to
# Kaldi's (see docs/trainer.md), from their shell variables; the graphs are
# written as EXP/fsts.JOB.gz as the stock scripts leave them (align_si.sh
# --use-graphs true reads them).
gpu_trainer_opts() {
  echo "--write-graphs=true --use-gpu=$use_gpu --num-threads=$num_threads" \
       "--stochastic-batch=$stochastic_batch --stochastic-passes=$stochastic_passes" \
       "--stochastic-memory=$stochastic_memory --stochastic-level=$stochastic_level" \
       "--stochastic-seed=$stochastic_seed"
}

# The trainer's own options, checked before Kaldi's stages run (the program
# checks them again): a wrong value fails here with the reason.
_gpu_fail() { echo "$0: $*" >&2; exit 1; }
case $use_gpu in yes|no|optional|wait) ;; *) _gpu_fail "--use-gpu $use_gpu: yes, no, optional or wait";; esac
case $stochastic_level in speaker|utterance) ;; *) _gpu_fail "--stochastic-level $stochastic_level: speaker or utterance";; esac
_gpu_num() { awk -v v="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(v ~ /^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$/ && v + 0 >= lo && (hi == "" || v + 0 <= hi)) }'; }
_gpu_num "$stochastic_batch" 0 1 || _gpu_fail "--stochastic-batch $stochastic_batch: a fraction of the data in (0, 1], or 0 (off)"
_gpu_num "$stochastic_passes" 0 "" || _gpu_fail "--stochastic-passes $stochastic_passes: a number of data passes >= 0"
_gpu_num "$stochastic_memory" 0 "" && _gpu_num "$stochastic_memory" 1e-9 "" || _gpu_fail "--stochastic-memory $stochastic_memory: a fraction of the data > 0"
[[ $num_threads =~ ^[0-9]+$ ]] || _gpu_fail "--num-threads $num_threads: a count >= 0 (0: this process's share of the cores)"
[[ $stochastic_seed =~ ^[0-9]+$ ]] || _gpu_fail "--stochastic-seed $stochastic_seed: an integer >= 0"
if [ "$stochastic_batch" != 0 ] && _gpu_num "$stochastic_batch" 1e-12 1 && [ "$stage" -gt 1 ]; then
  _gpu_fail "--stage $stage: the stochastic mode (--stochastic-batch) runs from the first iteration; restarting it at a later one is not supported"
fi
unset -f _gpu_num

# gpu_analyze_alignments CMD LANG DIR: steps/diagnostic/analyze_alignments.sh
# --cmd CMD LANG DIR, whose first step (a pipe of seven programs per job,
# ali-to-phones ... | gzip -c >DIR/phone_stats.JOB.gz, and its
# log/get_phone_alignments.JOB.log) the trainer did as it wrote the final
# alignments (--phone-stats=true); the rest as the stock script, with its
# lines. Without the trainer's files: the stock script.
gpu_analyze_alignments() {
  local cmd=$1 lang=$2 dir=$3 n j me=steps/diagnostic/analyze_alignments.sh
  n=$(cat $dir/num_jobs 2>/dev/null) || n=0
  for j in $(seq $n); do
    [ -f $dir/phone_stats.$j.gz ] || n=0
  done
  [ "$n" -gt 0 ] || { $me --cmd "$cmd" $lang $dir; return; }
  echo "$me --cmd $cmd $lang $dir"
  for f in $lang/words.txt $dir/final.mdl $dir/ali.1.gz $dir/num_jobs; do
    [ ! -f $f ] && echo "$me: expecting file $f to exist" && return 1
  done
  if ! $cmd $dir/log/analyze_alignments.log \
    gunzip -c "$dir/phone_stats.*.gz" \| \
    steps/diagnostic/analyze_phone_length_stats.py $lang; then
    echo "$me: analyze_phone_length_stats.py failed, but ignoring the error (it's just for diagnostics)"
  fi
  grep WARNING $dir/log/analyze_alignments.log
  echo "$me: see stats in $dir/log/analyze_alignments.log"
  rm $dir/phone_stats.*.gz
  return 0
}
