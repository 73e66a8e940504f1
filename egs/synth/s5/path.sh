# shellcheck shell=bash
# Sourced (bash) from inside an unpacked synth-s5 corpus dir (the cwd), as
# run.sh does, or by hand before running steps/*.sh yourself:
#   Kaldi from KALDI_BUNDLE (an unpacked kaldi-bin bundle: bin/ lib/) or
#   KALDI_ROOT (a built tree), then, unless KALDI_ONLY=true, GPU_BIN (this
#   repo's gmmbin-gpu by default) first on PATH. This is the only difference
#   from stock Kaldi: the corpus' own path.sh does the rest, and steps/*.sh
#   source that one again themselves (so GPU_BIN must stay exported).
[ -f ./path.sh ] && [ -d ./steps ] || { echo "path.sh: run from the synth-s5 corpus dir" >&2; return 1; }
if [ "${KALDI_ONLY:-false}" = true ]; then
  unset GPU_BIN
  # a gmmbin-gpu already on the caller's PATH must not shadow Kaldi's programs
  PATH=$(printf '%s' "$PATH" | tr ':' '\n' | awk '!/gmmbin-gpu\/?$/' | paste -sd: -)
else
  GPU_BIN=${GPU_BIN:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)/gmmbin-gpu}
  export GPU_BIN
fi
. ./path.sh
