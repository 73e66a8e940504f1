# shellcheck shell=bash
# Sourced by the recipe tests (tests/cli/recipe.sh, slurm.sh): the stock
# Kaldi bundle and the synth-s5 corpus, ready for egs/synth/s5/run.sh; call
# recipe_inputs first. Each function needs BIN, TOP and ends the test with
# SKIP (exit 77) where an input is missing, FAIL (exit 1) where a step fails.

# recipe_inputs: are the bundle and the corpus there? Sets kb to the bundle
# (a directory or the tarball) and SYNTH_CORPUS_DIR (dev/device/recipe-env.sh).
recipe_inputs() {
  . "$TOP/dev/device/recipe-env.sh"
  kb=""
  if [ -n "${KALDI_BUNDLE:-}" ] && [ -x "$KALDI_BUNDLE/bin/gmm-est" ]; then kb=$KALDI_BUNDLE
  elif [ -n "$KALDI_BUNDLE_TAR" ]; then kb=$KALDI_BUNDLE_TAR
  else echo "SKIP: no Kaldi bundle (no ../shared/kaldi/kaldi-bin.tar.xz, KALDI_BUNDLE unset)"; exit 77; fi
  [ -n "$SYNTH_CORPUS_TAR" ] || { echo "SKIP: no recipe corpus (../shared/recipe/synth-s5.tar.xz)"; exit 77; }
}

# recipe_kaldi TMP: kb becomes an unpacked bundle (TMP/kaldi/kb, or
# KALDI_BUNDLE as it is).
recipe_kaldi() {
  local tmp=$1
  if [ -f "$kb" ]; then
    mkdir -p "$tmp/kaldi" && tar -C "$tmp/kaldi" -xJf "$kb" || { echo "FAIL: unpacking $kb"; exit 1; }
    kb=$tmp/kaldi/kb
  fi
}

# recipe_rounding TMP: compares with Kaldi on this host are exact? Our
# programs, with nothing set, round as the Kaldi on PATH
# (base/matrix/blas-profile.h): unsets KALDI_GPU_BLAS_PROFILE, sets note (for
# the last line) to what they choose; SKIP when they cannot match this
# Kaldi (RECIPE_CHECK_FORCE=1: compare anyway).
recipe_rounding() {
  local line
  unset KALDI_GPU_BLAS_PROFILE
  line=$(PATH="$kb/bin:$PATH" "$BIN/kaldi-gpu-service" --print-rounding 2>/dev/null)
  note=" (rounding: ${line#*	*	})"
  case $line in
    *"	matched	"*) ;;
    *) [ "${RECIPE_CHECK_FORCE:-0}" = 1 ] ||
         { echo "SKIP: our programs cannot match this host's Kaldi: ${line#*	*	}"; exit 77; } ;;
  esac
}

# recipe_host_kaldi TMP: for the optional part of a test that compares with
# this host's Kaldi (the bundle: KALDI_BUNDLE, or the shared tarball). Sets kb
# (the unpacked bundle, or empty) and host_kaldi: 1 when our programs can
# match that Kaldi's rounding, its bin/ and lib/ then first on PATH and
# LD_LIBRARY_PATH; empty otherwise, with host_kaldi_why saying why.
recipe_host_kaldi() {
  local tmp=$1
  . "$TOP/dev/device/recipe-env.sh"
  unset KALDI_GPU_BLAS_PROFILE
  kb="" host_kaldi="" host_kaldi_why="no Kaldi bundle"
  if [ -n "${KALDI_BUNDLE:-}" ] && [ -x "$KALDI_BUNDLE/bin/gmm-est" ]; then kb=$KALDI_BUNDLE
  elif [ -n "$KALDI_BUNDLE_TAR" ]; then kb=$KALDI_BUNDLE_TAR; fi
  [ -n "$kb" ] || return 0
  recipe_kaldi "$tmp"
  if ( recipe_rounding "$tmp" ) >"$tmp/host-kaldi.skip" 2>&1; then
    host_kaldi=1
    export LD_LIBRARY_PATH=$kb/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export PATH=$kb/bin:$PATH
  else
    host_kaldi_why=$(grep -o 'SKIP.*' "$tmp/host-kaldi.skip")
  fi
}

# recipe_corpus TMP: the corpus in TMP/synth-s5, with data/train_300 (the
# 300 shortest utterances of data/train).
recipe_corpus() {
  local tmp=$1
  "$SYNTH_CORPUS_DIR/unpack.sh" "$tmp" >/dev/null || { echo "FAIL: unpacking the corpus"; exit 1; }
  touch "$tmp/synth-s5/.unpacked"
  ( cd "$tmp/synth-s5" && KALDI_BUNDLE=${KALDI_BUNDLE:-unused} utils/subset_data_dir.sh --shortest data/train 300 data/train_300 ) >"$tmp/subset.log" 2>&1 ||
    { cat "$tmp/subset.log"; echo "FAIL: subset_data_dir.sh"; exit 1; }
}
