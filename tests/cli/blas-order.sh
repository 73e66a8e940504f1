#!/bin/bash
# Our per-Gaussian log-likelihood order (gpu-align/gmm-core.h) against an
# installed OpenBLAS's cblas_sgemv, bit for bit (tools/sgemv-order-check):
# on SkylakeX/Cooperlake cores (the reference build's) our order must match
# every case; on Haswell/Zen cores the same kernels with that build's tail
# must (this checks the 4x4/4x2/4x1 kernel model our order shares with it).
# The library: $OPENBLAS_LIB, else $KALDI_BUNDLE/lib/libopenblas.so.0, else
# the system's libopenblas.so.0. SKIP (77) when none is there or the core is
# another one.
set -u
: "${TOP:?}"
tool="${TOOLS:-$TOP/build/tools}/sgemv-order-check"
[ -x "$tool" ] || { echo "SKIP: $tool not built"; exit 77; }
out=$("$tool" 2>&1)
rc=$?
if [ $rc = 2 ]; then echo "SKIP: no OpenBLAS to compare with ($out)"; exit 77; fi
[ $rc = 0 ] || { echo "FAIL: sgemv-order-check exit $rc: $out"; exit 1; }
echo "$out"
core=$(echo "$out" | awk '$1 == "core" {print $2}')
ours=$(echo "$out" | awk '$2 == "ours" {print $4}')
hsw=$(echo "$out" | awk '$2 == "haswell" {print $4}')
case "$core" in
  SkylakeX|Cooperlake|SapphireRapids)
    [ "$ours" = 0 ] || { echo "FAIL: $core: our order differs in $ours cases"; exit 1; } ;;
  Haswell|Zen)
    [ "$hsw" = 0 ] || { echo "FAIL: $core: kernel model differs in $hsw cases"; exit 1; } ;;
  *) echo "SKIP: OpenBLAS core $core: order not modelled"; exit 77 ;;
esac
# On such a host, KALDI_GPU_BLAS_PROFILE=hsw makes our aligner reproduce the
# local Kaldi: beam-edge at beam 10, where that Kaldi retries (the
# reference host's does not), when the bundle's gmm-align-compiled is here.
case "$core" in
  Haswell|Zen)
    if [ -n "${KALDI_BUNDLE:-}" ] && [ -x "$KALDI_BUNDLE/bin/gmm-align-compiled" ] && [ -n "${BIN:-}" ]; then
      tmp=$(mktemp -d /tmp/blas-order.XXXXXX)
      trap 'rm -rf "$tmp"' EXIT
      cd "$TOP/tests/data/beam-edge" || exit 1
      o="--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --retry-beam=40 --beam=10"
      LD_LIBRARY_PATH="$KALDI_BUNDLE/lib" "$KALDI_BUNDLE/bin/gmm-align-compiled" $o final.mdl \
        ark:graph.fsts ark:feats.ark "ark,t:$tmp/k.ali" 2>"$tmp/k.log"
      KALDI_GPU_BLAS_PROFILE=hsw "$BIN/gmm-align-compiled" --use-gpu=no $o final.mdl ark:graph.fsts \
        ark:feats.ark "ark,t:$tmp/o.ali" 2>"$tmp/o.log"
      cmp -s "$tmp/k.ali" "$tmp/o.ali" || { echo "FAIL: hsw profile: beam-edge differs from this host's Kaldi"; exit 1; }
      [ "$(grep -c Retrying "$tmp/k.log")" = "$(grep -c Retrying "$tmp/o.log")" ] ||
        { echo "FAIL: hsw profile: retry decision differs from this host's Kaldi"; exit 1; }
      echo "hsw profile: beam-edge at beam 10 = this host's Kaldi ($(grep -c Retrying "$tmp/k.log") retry)"
    fi ;;
esac
echo "blas order checks passed ($core)"
