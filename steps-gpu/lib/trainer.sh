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
# Kaldi's (see docs/trainer.md), from their shell variables.
gpu_trainer_opts() {
  echo "--use-gpu=$use_gpu --num-threads=$num_threads" \
       "--stochastic-batch=$stochastic_batch --stochastic-passes=$stochastic_passes" \
       "--stochastic-memory=$stochastic_memory --stochastic-level=$stochastic_level" \
       "--stochastic-seed=$stochastic_seed"
}
