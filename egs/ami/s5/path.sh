# The recipe's path.sh: Kaldi's own AMI path.sh, then the GPU plugin first on
# PATH. This is the only difference from Kaldi's egs/ami/s5b.
: "${KALDI_ROOT:?set KALDI_ROOT to your Kaldi checkout}"
PLUGIN_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
. "$KALDI_ROOT/egs/ami/s5b/path.sh"
export PATH="$PLUGIN_ROOT/gmmbin-gpu:$PATH"
