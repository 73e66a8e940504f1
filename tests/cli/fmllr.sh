#!/bin/bash
# gmm-est-fmllr against Kaldi's own (gmmbin/gmm-est-fmllr.cc): every case of
# tests/cli/lib/fmllr-cases.sh (update types full, diag, offset, none;
# several speakers, one below the min-count; per utterance; missing
# features and posteriors, a wrong size; the steps scripts' posteriors pipe
# and feature pipes in-process; an unknown update type; a wrong dimension;
# wrong arguments) for each OpenBLAS core Kaldi's output was recorded with
# (tests/data/fmllr/expect.txt, dev/oracles/fmllr-refs.sh): the transforms'
# md5 and the exit status, with SIMD and scalar code, one and three
# threads; Kaldi's log lines (Haswell); five cases against Kaldi's program
# run now with this CPU's own core. Ours calls the Kaldi's OpenBLAS for
# the update, so it needs a Kaldi bundle (tests/cli/lib/kaldi-bundle.sh):
# without one (and without Kaldi's own program to run instead) it must
# refuse (ERROR, exit 255), which is checked, and the rest is skipped. Then
# a profile that is not the library's: Kaldi's own program runs instead.
# Env: BIN, TOP. Exit 0 pass, 1 fail, 77 skip.
set -u
: "${BIN:?}" "${TOP:?}"
prog="$BIN/gmm-est-fmllr"
if [ ! -x "$prog" ]; then echo "SKIP: $prog not built"; exit 77; fi
cd "$TOP/tests/data" || exit 1
tmp=$(mktemp -d /tmp/fmllr.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
. "$TOP/tests/cli/lib/fmllr-cases.sh"
. "$TOP/tests/cli/lib/kaldi-bundle.sh"
fmllr_inputs "$tmp" mllt
# our programs first on PATH (the pipes' ali-to-post, weight-silence-post)
export PATH="$BIN:$PATH"
one="${fmllr_cases[0]#*|}"

# Without a Kaldi: a refusal (Kaldi's own program is not there to run
# instead), nothing written.
(unset KALDI_ROOT; PATH="$BIN:/usr/bin:/bin" eval "\"\$prog\" $one ark:\$tmp/out" 2>"$tmp/log")
rc=$?
[ "$rc" = 255 ] && grep -q "^ERROR.*Cannot compute Kaldi's fMLLR transforms here: .*not on PATH" "$tmp/log" &&
  [ ! -s "$tmp/out" ] || { fail "no Kaldi: exit $rc, not the refusal"; cat "$tmp/log"; }

kb=$(find_kaldi_bundle "$tmp")
if [ -z "$kb" ]; then
  [ $fails = 0 ] || exit 1
  echo "SKIP: no Kaldi bundle (gmm-est-fmllr computes its update with the Kaldi's OpenBLAS)"
  exit 77
fi
export PATH="$BIN:$kb/bin:$PATH" LD_LIBRARY_PATH="$kb/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
unset KALDI_ROOT
# the recorded outputs were made so (transform-feats' sgemm splits over threads)
export OPENBLAS_NUM_THREADS=1
kaldi_lines() {
  grep -E "gmm-est-fmllr\.cc:|fmllr-diag-gmm\.cc:|diag-gmm\.cc:|^(Usage|Estimate)" "$1" |
    sed 's/\[[^]]*\]//'
}
prof_of() { case $1 in Haswell) echo hsw ;; Sandybridge) echo snb ;; Nehalem) echo nhm ;;
  Prescott) echo sse ;; SkylakeX) echo skx ;; Cooperlake) echo cpl ;; esac; }
nrun=0
for core in $(cut -d' ' -f2 fmllr/expect.txt | sort -u); do
  # a core this CPU cannot run (AVX-512 kernels here) is skipped by name
  if [ "$core" = SkylakeX ] || [ "$core" = Cooperlake ]; then
    grep -q avx512f /proc/cpuinfo || { echo "note: $core not checked (no AVX-512)"; continue; }
  fi
  p=$(prof_of "$core")
  for mode in "0 1" "1 1" "0 3"; do
    set -- $mode
    nosimd=$1 threads=$2
    for c in "${fmllr_cases[@]}"; do
      name=${c%%|*}
      # the error cases once per core
      case $name in badtype|dim|usage) [ "$mode" = "0 1" ] || continue ;; esac
      read -r _ _ sum rc < <(grep "^$name $core " fmllr/expect.txt)
      rm -f "$tmp/out"
      ws=$(fmllr_wspec "$name" "$tmp/out")
      [ "$name" = usage ] && ws=
      eval "OPENBLAS_CORETYPE=$core KALDI_GPU_BLAS_PROFILE=$p KALDI_GPU_DEV_NO_SIMD=$nosimd \
        KALDI_GPU_DEV_ACC_HOST_THREADS=$threads \"\$prog\" ${c#*|} $ws" 2>"$tmp/log"
      got=$?
      nrun=$((nrun + 1))
      what="$name ($core, KALDI_GPU_DEV_NO_SIMD=$nosimd, $threads threads)"
      [ "$got" = "$rc" ] || { fail "$what: exit $got, Kaldi's $rc"; tail -5 "$tmp/log"; continue; }
      gsum=$( [ -s "$tmp/out" ] && md5sum <"$tmp/out" | cut -d' ' -f1 || echo none)
      [ "$gsum" = "$sum" ] || fail "$what: transforms differ from Kaldi's"
      if [ "$core/$mode" = "Haswell/0 1" ]; then
        diff <(kaldi_lines "$tmp/log") "fmllr/$name.log" >"$tmp/d" ||
          { fail "$what: log lines differ"; head "$tmp/d"; }
      fi
    done
  done
done
[ "$nrun" -ge 150 ] || fail "only $nrun runs: tests/data/fmllr/expect.txt incomplete"
# the cores must give different transforms (else the loop tests no switch)
[ "$(grep '^full ' fmllr/expect.txt | cut -d' ' -f3 | sort -u | wc -l)" -ge 3 ] ||
  fail "the cores' expectations are not distinct"
# the in-process pipes ran in-process (not as real pipes)
KALDI_GPU_BLAS_PROFILE=hsw OPENBLAS_CORETYPE=Haswell eval "\"\$prog\" --verbose=1 \
  $(fmllr_args pipe) ark:\$tmp/out" 2>"$tmp/log"
grep -q "Feature pipeline computed in-process" "$tmp/log" || fail "pipe: the feature chain did not run in-process"

# Kaldi's gmm-est-fmllr run now on this CPU (its own core: SkylakeX on an
# AVX-512 host) against ours with the profile it picks by itself.
for name in full diag utt uttdiag pipe; do
  c="$name|$(fmllr_args $name)"
  (unset KALDI_GPU_BLAS_PROFILE OPENBLAS_CORETYPE
   eval "\"\$kb/bin/gmm-est-fmllr\" ${c#*|} ark:\$tmp/k" 2>"$tmp/klog"
   eval "\"\$prog\" ${c#*|} ark:\$tmp/o" 2>"$tmp/log")
  [ -s "$tmp/k" ] && cmp -s "$tmp/k" "$tmp/o" || fail "$name: ours differs from Kaldi's run now on this CPU"
  diff <(kaldi_lines "$tmp/klog") <(kaldi_lines "$tmp/log") >/dev/null ||
    fail "$name: lines differ from Kaldi's run now"
done

# A profile that is not the library's core: Kaldi's own program runs
# instead (the same transforms as Kaldi's run by hand), saying why.
OPENBLAS_CORETYPE=Haswell KALDI_GPU_BLAS_PROFILE=sse eval "\"\$prog\" $one ark:\$tmp/out" 2>"$tmp/log"
rc=$?
OPENBLAS_CORETYPE=Haswell eval "\"\$kb/bin/gmm-est-fmllr\" $one ark:\$tmp/kout" 2>/dev/null
[ "$rc" = 0 ] && grep -q "^LOG.*not the OpenBLAS Prescott.*: running .*gmm-est-fmllr instead" "$tmp/log" &&
  cmp -s "$tmp/out" "$tmp/kout" || { fail "profile mismatch: exit $rc, Kaldi's program not run instead"; cat "$tmp/log"; }

# The train_sat form: the posteriors on stdin from our ali-to-post and
# weight-silence-post, the features through the stage's pipe.
KALDI_GPU_BLAS_PROFILE=hsw OPENBLAS_CORETYPE=Haswell
export KALDI_GPU_BLAS_PROFILE OPENBLAS_CORETYPE
gunzip -c mllt/tri2-ali.gz | "$BIN/ali-to-post" ark:- ark:- 2>/dev/null |
  "$BIN/weight-silence-post" 0.0 $fm_sil models/tri2/final.mdl ark:- ark:- 2>/dev/null |
  "$prog" --fmllr-update-type=full --spk2utt=ark:fmllr/spk2utt models/tri2/final.mdl \
    ark:feats/lda.ark ark,s,cs:- ark:"$tmp/out" 2>"$tmp/log"
read -r _ _ sum _ < <(grep "^full Haswell " fmllr/expect.txt)
[ "$(md5sum <"$tmp/out" | cut -d' ' -f1)" = "$sum" ] || fail "stdin form: transforms differ"

echo "fmllr: $nrun runs against Kaldi's outputs"
[ $fails = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo PASS
