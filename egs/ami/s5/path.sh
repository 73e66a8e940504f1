# The recipe's path.sh: Kaldi's own AMI path.sh, then the GPU plugin first on
# PATH. This is the only difference from Kaldi's egs/ami/s5b.
: "${KALDI_ROOT:?set KALDI_ROOT to your Kaldi checkout}"
PLUGIN_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
. "$KALDI_ROOT/egs/ami/s5b/path.sh"
# KALDI_ONLY=true (run.sh --kaldi-only true): stock Kaldi, for comparison.
[ "${KALDI_ONLY:-false}" = true ] || export PATH="$PLUGIN_ROOT/gmmbin-gpu:$PATH"
