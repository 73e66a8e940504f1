#!/bin/bash
# The rounding chosen automatically (base/matrix/blas-profile.h) against the
# Kaldi that is on PATH: the Kaldi bundle ($KALDI_BUNDLE, else
# ../shared/kaldi/kaldi-bin.tar.xz unpacked here; SKIP without one), whose
# libopenblas is DYNAMIC_ARCH. For each OpenBLAS core this CPU can run,
# forced with OPENBLAS_CORETYPE (Kaldi and our programs see the same
# environment), the bundle first on PATH, KALDI_GPU_BLAS_PROFILE unset:
#  1. kaldi-gpu-service --print-rounding names that core's profile, "matched";
#  2. gmm-acc-stats-ali (mono, noisy mono, tri2): Kaldi's statistics' bytes;
#  3. gmm-align-compiled (noisy mono, where pruning decides; beam-edge at
#     beam 10, where the retry does): Kaldi's alignments and scores, and our
#     LOG line names the profile;
#  4. the in-process feature chains (deltas, LDA, SAT's LDA + fMLLR, at
#     this CPU's OpenBLAS thread count and at 1): the archive Kaldi's pipe
#     writes.
# Then with no Kaldi on PATH: the reference (skx) and the reason. (The BLAS
# operations themselves, per core: tests/cli/blas-order.sh.)
# Then through the GPU service (its CPU test mode): one service per profile,
# each rounding as its jobs' Kaldi.
# Env: BIN, TOP, TOOLS, TEST_BIN; ROUNDING_CORES (the cores tried; default
# all above). Exit 0 pass, 1 fail, 77 skip.
set -u
: "${BIN:?}" "${TOP:?}"
TOOLS=${TOOLS:-$TOP/build/tools}
for p in "$BIN/gmm-acc-stats-ali" "$BIN/gmm-align-compiled" "$BIN/kaldi-gpu-service" \
         "$TOOLS/feat-copy"; do
  [ -x "$p" ] || { echo "SKIP: $p not built"; exit 77; }
done
tmp=$(mktemp -d /tmp/rounding-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
. "$TOP/tests/cli/lib/kaldi-bundle.sh"
kb=$(find_kaldi_bundle "$tmp") || { echo "SKIP: no Kaldi bundle (KALDI_BUNDLE, ../shared/kaldi/kaldi-bin.tar.xz)"; exit 77; }
cd "$TOP/tests/data" || exit 1
unset KALDI_GPU_BLAS_PROFILE OPENBLAS_CORETYPE
export KALDI_GPU_SERVICE=no
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
kpath="$kb/bin:$PATH"

profile_of() {  # OpenBLAS core -> our profile
  case $1 in
    SkylakeX|SapphireRapids) echo skx ;; Cooperlake) echo cpl ;; Haswell|Zen) echo hsw ;;
    Sandybridge) echo snb ;; Nehalem) echo nhm ;; Prescott) echo sse ;; *) echo none ;;
  esac
}

align_opts="--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --retry-beam=40"
acc_cases=(
  "mono models/mono/final.mdl ark:feats/delta.ark ark:kaldi/mono/ali.ark"
  "noisy-mono models/mono/final.mdl ark:noisy/delta.ark ark:noisy/mono.ali.ark"
  "tri2 models/tri2/final.mdl ark:feats/lda.ark ark:kaldi/tri2/ali.ark"
)
align_cases=(
  "noisy-mono --beam=10 models/mono/final.mdl ark:gunzip@-c@graphs/mono.fsts.gz| ark:noisy/delta.ark"
  "beam-edge --beam=10 beam-edge/final.mdl ark:beam-edge/graph.fsts ark:beam-edge/feats.ark"
)
feat_cases=(delta lda2 sat)
checked=""
for core in ${ROUNDING_CORES:-Prescott Nehalem Sandybridge Haswell SkylakeX Cooperlake SapphireRapids}; do
  export OPENBLAS_CORETYPE=$core
  # Kaldi first: it says which core it runs (a fallback for a core this CPU
  # lacks) or dies of an illegal instruction.
  set -- ${acc_cases[0]}
  (PATH=$kpath OPENBLAS_VERBOSE=2 gmm-acc-stats-ali "$2" "$3" "$4" "$tmp/k.$1.acc" 2>"$tmp/k.log") \
    2>/dev/null  # quiet about SIGILL
  rc=$?
  if [ $rc = 255 ]; then  # Kaldi's own error exit, not a signal
    fail "core $core: Kaldi's gmm-acc-stats-ali failed: $(grep -m1 -E '^(ERROR|.*error)' "$tmp/k.log")"; continue
  fi
  if [ $rc -ge 128 ]; then echo "rounding: core $core: this CPU cannot run it (signal $((rc - 128)))"; continue; fi
  [ $rc = 0 ] || { fail "$core: Kaldi's gmm-acc-stats-ali exit $rc"; continue; }
  got=$(sed -n 's/^Core: //p' "$tmp/k.log" | head -1)
  want=$(profile_of "$got")
  case " $checked " in *" $got "*) echo "rounding: core $core runs as $got: done"; continue ;; esac
  checked="$checked $got"
  # 1. the choice
  line=$(PATH=$kpath "$BIN/kaldi-gpu-service" --print-rounding 2>/dev/null)
  case $line in
    "$want	matched	"*) ;;
    *) fail "$core (OpenBLAS core $got): --print-rounding says '$line', want $want matched" ;;
  esac
  if [ "$want" = none ]; then echo "rounding: core $got is not reproduced: its outputs not compared"; continue; fi
  # 2. statistics
  for c in "${acc_cases[@]}"; do
    set -- $c
    [ -f "$tmp/k.$1.acc" ] || PATH=$kpath gmm-acc-stats-ali "$2" "$3" "$4" "$tmp/k.$1.acc" 2>/dev/null ||
      fail "$core $1: Kaldi's gmm-acc-stats-ali"
    PATH=$kpath "$BIN/gmm-acc-stats-ali" --use-gpu=no "$2" "$3" "$4" "$tmp/o.$1.acc" 2>"$tmp/o.log" ||
      fail "$core $1: our gmm-acc-stats-ali exit $?"
    cmp -s "$tmp/k.$1.acc" "$tmp/o.$1.acc" || fail "$core $1: statistics differ from Kaldi's"
    grep -q "Rounding as OpenBLAS .* kernels (.*reports core $got)" "$tmp/o.log" ||
      fail "$core $1: no LOG line naming core $got: $(grep -m1 Rounding "$tmp/o.log")"
    rm -f "$tmp/k.$1.acc"
  done
  # 3. alignments
  for c in "${align_cases[@]}"; do
    set -- $c
    g=${4//@/ }
    PATH=$kpath gmm-align-compiled $align_opts "$2" "$3" "$g" "$5" "ark:$tmp/k.ali" "ark,t:$tmp/k.scores" \
      2>"$tmp/k.alog" || fail "$core $1: Kaldi's gmm-align-compiled"
    PATH=$kpath "$BIN/gmm-align-compiled" --use-gpu=no $align_opts "$2" "$3" "$g" "$5" "ark:$tmp/o.ali" \
      "ark,t:$tmp/o.scores" 2>"$tmp/o.alog" || fail "$core $1: our gmm-align-compiled exit $?"
    cmp -s "$tmp/k.ali" "$tmp/o.ali" || fail "$core $1: alignments differ from Kaldi's"
    cmp -s "$tmp/k.scores" "$tmp/o.scores" || fail "$core $1: scores differ from Kaldi's"
    [ "$(grep -c Retrying "$tmp/k.alog")" = "$(grep -c Retrying "$tmp/o.alog")" ] ||
      fail "$core $1: retries differ from Kaldi's"
  done
  # 4. feature chains, at OpenBLAS's default thread count and at 1
  for th in default 1; do
    for name in "${feat_cases[@]}"; do
      pipe=$(awk -F'|' -v n="$name" '$1 == n {sub(/^[^|]*\|[^|]*\|/, ""); print; exit}' featpipe/cases.txt)
      envs=(); [ $th = 1 ] && envs=(OPENBLAS_NUM_THREADS=1)
      env "${envs[@]}" PATH=$kpath sh -c "$pipe" >"$tmp/k.ark" 2>/dev/null || fail "$core $name: Kaldi's pipe"
      env "${envs[@]}" PATH=$kpath "$TOOLS/feat-copy" "ark:$pipe |" "ark:$tmp/o.ark" 2>"$tmp/o.flog" ||
        fail "$core $name: feat-copy exit $?"
      cmp -s "$tmp/k.ark" "$tmp/o.ark" || fail "$core $name (OpenBLAS threads $th): features differ from Kaldi's"
    done
  done
  echo "rounding: OpenBLAS core $got ($core): profile $want = Kaldi's statistics, alignments and features"
done
unset OPENBLAS_CORETYPE
[ -n "$checked" ] || { echo "SKIP: no OpenBLAS core of the bundle runs here"; exit 77; }
# Through the GPU service (its CPU test mode, the programs built with the
# test hooks): jobs of two cores get two services, each rounding as its
# jobs' Kaldi (started with --rounding, part of its identity).
cores=$(echo $checked | awk '{print $1; if (NF > 1) print $NF}')
if [ -x "${TEST_BIN:-}/gmm-acc-stats-ali" ] && [ -x "${TEST_BIN:-}/kaldi-gpu-service" ]; then
  svcdir=$tmp/svc
  trap 'pkill -f -- "--socket=$svcdir/" 2>/dev/null; rm -rf "$tmp"' EXIT
  set -- ${acc_cases[1]}
  for core in $cores; do
    OPENBLAS_CORETYPE=$core PATH=$kpath gmm-acc-stats-ali "$2" "$3" "$4" "$tmp/k.svc.acc" 2>/dev/null ||
      fail "service, core $core: Kaldi's gmm-acc-stats-ali"
    env -u KALDI_GPU_SERVICE OPENBLAS_CORETYPE=$core PATH=$kpath KALDI_GPU_SERVICE_DIR=$svcdir \
      KALDI_GPU_TEST_SERVICE_FORCE=1 KALDI_GPU_TEST_SERVICE_CPU=1 KALDI_GPU_SERVICE_IDLE=20 \
      "$TEST_BIN/gmm-acc-stats-ali" "$2" "$3" "$4" "$tmp/o.svc.acc" 2>"$tmp/o.svc.log" ||
      fail "service, core $core: our gmm-acc-stats-ali exit $?"
    grep -q "GPU service" "$tmp/o.svc.log" || fail "service, core $core: the service was not used"
    cmp -s "$tmp/k.svc.acc" "$tmp/o.svc.acc" || fail "service, core $core: statistics differ from Kaldi's"
    kern=$(PATH=$kpath OPENBLAS_CORETYPE=$core "$BIN/kaldi-gpu-service" --print-rounding 2>/dev/null | cut -f3)
    grep -q "Rounding as ${kern% (*} (KALDI_GPU_BLAS_PROFILE=" "$svcdir"/service-*.log ||
      fail "service, core $core: no service rounding as ${kern% (*}"
  done
  n=$(ls "$svcdir"/gpu-*.sock 2>/dev/null | wc -l)
  [ "$n" = "$(echo $cores | wc -w)" ] || fail "service: $n sockets for cores $(echo $cores)"
  pkill -f -- "--socket=$svcdir/" 2>/dev/null
  echo "rounding: through the service (cores $(echo $cores)): Kaldi's statistics"
fi
# Without a Kaldi on PATH (nor KALDI_ROOT): the reference, saying why.
line=$(env -u KALDI_ROOT PATH=/usr/bin:/bin "$BIN/kaldi-gpu-service" --print-rounding 2>/dev/null)
case $line in
  "skx	reference	OpenBLAS SkylakeX kernels (the reference: no Kaldi program"*) ;;
  *) fail "no Kaldi: --print-rounding says '$line'" ;;
esac
# A core we do not reproduce (Core2: SSE-era, but its sgemm tiles differ):
# the reference, with one WARNING saying so.
if ( OPENBLAS_CORETYPE=Core2 PATH=$kpath gmm-est --help ) >/dev/null 2>&1; then
  line=$(OPENBLAS_CORETYPE=Core2 PATH=$kpath "$BIN/kaldi-gpu-service" --print-rounding 2>/dev/null)
  case $line in
    "skx	unmatched	OpenBLAS SkylakeX kernels (the reference: OpenBLAS 0.3.21 at "*"reports core Core2, whose kernels we do not reproduce"*) ;;
    *) fail "core Core2: --print-rounding says '$line'" ;;
  esac
  set -- ${acc_cases[0]}
  OPENBLAS_CORETYPE=Core2 PATH=$kpath "$BIN/gmm-acc-stats-ali" --use-gpu=no "$2" "$3" "$4" "$tmp/c2.acc" \
    2>"$tmp/c2.log" || fail "core Core2: our gmm-acc-stats-ali exit $?"
  [ "$(grep -c '^WARNING .*Rounding as OpenBLAS SkylakeX kernels, the reference (.*core Core2' "$tmp/c2.log")" = 1 ] ||
    fail "core Core2: not one WARNING: $(grep Rounding "$tmp/c2.log")"
fi
# A wrapper script named gmm-est first on PATH is passed over; a dynamically
# linked program without a BLAS in its place is not Kaldi's BLAS: refused.
mkdir -p "$tmp/wrap" "$tmp/noblas"
printf '#!/bin/sh\nexec %s "$@"\n' "$kb/bin/gmm-est" >"$tmp/wrap/gmm-est"
chmod +x "$tmp/wrap/gmm-est"
line=$(PATH="$tmp/wrap:$kpath" "$BIN/kaldi-gpu-service" --print-rounding 2>/dev/null)
case $line in *"	matched	"*"gmm-est at $kb/bin/gmm-est:"*) ;; *) fail "behind a wrapper script: '$line'" ;; esac
cp "$(type -P true)" "$tmp/noblas/gmm-est"
line=$(PATH="$tmp/noblas:$kpath" "$BIN/kaldi-gpu-service" --print-rounding 2>/dev/null)
case $line in
  "skx	unmatched	"*"loads no BLAS library we know"*) ;;
  *) fail "a program without BLAS: '$line'" ;;
esac
# KALDI_GPU_BLAS_PROFILE overrides the Kaldi found.
line=$(PATH=$kpath KALDI_GPU_BLAS_PROFILE=nhm "$BIN/kaldi-gpu-service" --print-rounding 2>/dev/null)
[ "$line" = "nhm	set	OpenBLAS Nehalem kernels (KALDI_GPU_BLAS_PROFILE=nhm)" ] ||
  fail "KALDI_GPU_BLAS_PROFILE=nhm: --print-rounding says '$line'"
[ $fails = 0 ] && echo "PASS (cores:$checked)" && exit 0
echo "$fails failure(s)"
exit 1
