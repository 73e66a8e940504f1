# Sourced by tests/cli/*.sh: find_kaldi_bundle TMPDIR prints the directory of
# an unpacked Kaldi bundle (bin/, lib/): $KALDI_BUNDLE, else
# $TOP/../shared/kaldi when it is unpacked, else its kaldi-bin.tar.xz
# unpacked into TMPDIR; nothing when there is none. Needs TOP.
find_kaldi_bundle() {
  local kb=${KALDI_BUNDLE:-}
  [ -n "$kb" ] || { [ -d "$TOP/../shared/kaldi/bin" ] && kb=$TOP/../shared/kaldi; }
  if [ -z "$kb" ] && [ -r "$TOP/../shared/kaldi/kaldi-bin.tar.xz" ]; then
    tar -C "$1" -xJf "$TOP/../shared/kaldi/kaldi-bin.tar.xz" && kb=$1/kb
  fi
  [ -n "$kb" ] && [ -x "$kb/bin/gmm-est" ] && [ -r "$kb/lib/libopenblas.so.0" ] && (cd "$kb" && pwd)
}
