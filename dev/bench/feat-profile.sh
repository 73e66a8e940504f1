# Sourced by featpipe-compare.sh and feat-bench.sh: sets KALDI_GPU_BLAS_PROFILE
# (unless set) to the rounding of the Kaldi on PATH. Its OpenBLAS names its
# kernel set with OPENBLAS_VERBOSE=2 ("Core: SkylakeX"): SkylakeX,
# SapphireRapids -> skx; Cooperlake -> cpl; Haswell, Zen -> hsw. Without an answer,
# the CPU flags decide (avx512f -> skx, else hsw): an AVX-512 CPU whose
# OpenBLAS uses the Haswell kernels (Zen 4 with OpenBLAS 0.3.21) would be
# misjudged that way. FEAT_BLAS_CORE is left with what OpenBLAS said.
feat_profile() {
  local top=$1 core=""
  FEAT_BLAS_CORE=""
  [ -n "${KALDI_GPU_BLAS_PROFILE:-}" ] && return
  if command -v transform-feats >/dev/null; then
    core=$(cd "$top/tests/data" && OPENBLAS_VERBOSE=2 transform-feats featpipe/final.mat \
      "ark:splice-feats --left-context=3 --right-context=3 scp:featpipe/feats.scp ark:- |" \
      ark:/dev/null 2>&1 | sed -n 's/^Core: //p' | head -1)
  fi
  FEAT_BLAS_CORE=$core
  case "$core" in
    SkylakeX|SapphireRapids) export KALDI_GPU_BLAS_PROFILE=skx ;;
    Cooperlake) export KALDI_GPU_BLAS_PROFILE=cpl ;;
    Haswell|Zen) export KALDI_GPU_BLAS_PROFILE=hsw ;;
    *) if grep -qw avx512f /proc/cpuinfo; then export KALDI_GPU_BLAS_PROFILE=skx; else export KALDI_GPU_BLAS_PROFILE=hsw; fi ;;
  esac
}
