# shellcheck shell=bash
# Sourced (bash): where the shared recipe inputs are. Sets, unless already set:
#   SHARED_DIR        the shared dir (shared/ in the repo, or ../shared beside it)
#   KALDI_BUNDLE_TAR  SHARED_DIR/kaldi/kaldi-bin.tar.xz  (stock Kaldi, CPU build)
#   SYNTH_CORPUS_DIR  SHARED_DIR/recipe                  (holds unpack.sh)
#   SYNTH_CORPUS_TAR  SYNTH_CORPUS_DIR/synth-s5.tar.xz   (the synth-s5 recipe)
# A variable whose file does not exist is left empty; callers check.
_re_top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ -z "${SHARED_DIR:-}" ]; then
  for _re_d in "$_re_top/shared" "$_re_top/../shared"; do
    if [ -d "$_re_d/recipe" ] || [ -d "$_re_d/kaldi" ]; then SHARED_DIR=$(cd "$_re_d" && pwd); break; fi
  done
fi
SHARED_DIR=${SHARED_DIR:-}
if [ -z "${KALDI_BUNDLE_TAR:-}" ] && [ -f "$SHARED_DIR/kaldi/kaldi-bin.tar.xz" ]; then
  KALDI_BUNDLE_TAR=$SHARED_DIR/kaldi/kaldi-bin.tar.xz
fi
if [ -z "${SYNTH_CORPUS_DIR:-}" ] && [ -x "$SHARED_DIR/recipe/unpack.sh" ]; then
  SYNTH_CORPUS_DIR=$SHARED_DIR/recipe
fi
KALDI_BUNDLE_TAR=${KALDI_BUNDLE_TAR:-}
SYNTH_CORPUS_DIR=${SYNTH_CORPUS_DIR:-}
SYNTH_CORPUS_TAR=${SYNTH_CORPUS_TAR:-}
if [ -z "$SYNTH_CORPUS_TAR" ] && [ -f "$SYNTH_CORPUS_DIR/synth-s5.tar.xz" ]; then
  SYNTH_CORPUS_TAR=$SYNTH_CORPUS_DIR/synth-s5.tar.xz
fi
unset _re_top _re_d
