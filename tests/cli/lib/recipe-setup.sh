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

# recipe_rounding TMP: compares with Kaldi on this host are exact? Sets note
# (for the last line) and, where this host's Kaldi rounds differently from
# the reference hosts, exports the matching KALDI_GPU_BLAS_PROFILE; SKIP without
# one (RECIPE_CHECK_FORCE=1: compare anyway).
recipe_rounding() {
  local tmp=$1 prof core
  # Kaldi's float rounding follows the OpenBLAS kernels picked for the CPU at
  # run time. Our programs reproduce Kaldi on the reference hosts (AVX-512,
  # OpenBLAS "Cooperlake"), where tests/data/kaldi/*/final.acc were made; a
  # byte comparison with a Kaldi run on this host means something only if
  # this host's Kaldi reproduces those stats itself.
  ( cd "$TOP/tests/data" && "$kb/bin/gmm-acc-stats-ali" models/mono/final.mdl ark:feats/delta.ark \
      ark:kaldi/mono/ali.ark "$tmp/host.acc" ) >"$tmp/host.log" 2>&1 || { cat "$tmp/host.log"; echo "FAIL: Kaldi's gmm-acc-stats-ali"; exit 1; }
  note=""
  if [ "${RECIPE_CHECK_FORCE:-0}" != 1 ] && ! cmp -s "$tmp/host.acc" "$TOP/tests/data/kaldi/mono/final.acc"; then
    # Another kernel set: our programs can reproduce it on request
    # (KALDI_GPU_BLAS_PROFILE, gpu-acc/acc-cpu-fast.c); compare with that profile
    # if it gives this host's Kaldi bytes, else there is nothing exact to test.
    if grep -qw avx512f /proc/cpuinfo; then prof=skx
    elif grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then prof=hsw; else prof=plain; fi
    ( cd "$TOP/tests/data" && KALDI_GPU_BLAS_PROFILE=$prof "$BIN/gmm-acc-stats-ali" --use-gpu=no models/mono/final.mdl \
        ark:feats/delta.ark ark:kaldi/mono/ali.ark "$tmp/ours-host.acc" ) >"$tmp/ours-host.log" 2>&1
    if cmp -s "$tmp/ours-host.acc" "$tmp/host.acc"; then
      export KALDI_GPU_BLAS_PROFILE=$prof
      note=" (this host's Kaldi rounds as OpenBLAS profile $prof: ours run with KALDI_GPU_BLAS_PROFILE=$prof)"
    else
      core=$(cd "$TOP/tests/data" && OPENBLAS_VERBOSE=2 "$kb/bin/gmm-acc-stats-ali" models/mono/final.mdl \
        ark:feats/delta.ark ark:kaldi/mono/ali.ark /dev/null 2>&1 | sed -n 's/^Core: //p' | head -1)
      echo "SKIP: Kaldi on this host (OpenBLAS core ${core:-?}, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')) rounds differently from the reference host and from our profile $prof"
      exit 77
    fi
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
