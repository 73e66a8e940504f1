#!/bin/bash
# gmm-acc-mllt against Kaldi's own (gmmbin/gmm-acc-mllt.cc):
#  1. every case of tests/cli/lib/mllt-cases.sh (the steps scripts' posteriors
#     pipe computed in-process included), for each OpenBLAS profile
#     Kaldi's output was recorded with (tests/data/mllt/expect.txt, made by
#     dev/oracles/mllt-refs.sh), forced with KALDI_GPU_BLAS_PROFILE, SIMD and
#     scalar code, one and three threads: the statistics' md5 and the exit
#     status; the log lines of gmm-acc-mllt.cc (and the ERROR of a dimension
#     mismatch) as Kaldi's; then what Kaldi would abort on (a transition-id
#     out of range): an ERROR naming the utterance, exit 255, no output;
#  2. with a Kaldi bundle (tests/cli/lib/kaldi-bundle.sh): Kaldi's
#     gmm-acc-mllt run now on this CPU against ours with the profile our
#     program chooses for it (the stage's feature pipe included), also with
#     the real pipes (KALDI_GPU_FEATS_PIPE=0).
#  3. ali-to-post and weight-silence-post (ours) against Kaldi's recorded
#     outputs and lines, and the three in train_lda_mllt.sh's own form (the
#     posteriors on stdin), per profile.
# Env: BIN, TOP. Exit 0 pass, 1 fail.
set -u
: "${BIN:?}" "${TOP:?}"
prog="$BIN/gmm-acc-mllt"
if [ ! -x "$prog" ]; then echo "SKIP: $prog not built"; exit 77; fi
cd "$TOP/tests/data" || exit 1
tmp=$(mktemp -d /tmp/mllt.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
. "$TOP/tests/cli/lib/mllt-cases.sh"
mllt_inputs "$tmp" mllt
# the lines Kaldi's log and ours share: gmm-acc-mllt.cc's, the dimension
# ERROR, the usage text's first two lines
kaldi_lines() {  # sorted: Kaldi's pipe programs end in any order
  grep -E "(gmm-acc-mllt|ali-to-post|weight-silence-post)\.cc:|diag-gmm\.cc:|^(Usage|Accumulate)" "$1" |
    sed 's/\[[^]]*\]//' | sort
}
nrun=0
for p in $(cut -d' ' -f2 mllt/expect.txt | sort -u); do
  for mode in "0 1" "1 1" "0 3"; do
    set -- $mode
    nosimd=$1 threads=$2
    for c in "${mllt_cases[@]}"; do
      name=${c%%|*}
      read -r _ _ sum rc < <(grep "^$name $p " mllt/expect.txt)
      rm -f "$tmp/out"
      eval "KALDI_GPU_BLAS_PROFILE=$p KALDI_GPU_DEV_NO_SIMD=$nosimd \
        KALDI_GPU_DEV_ACC_HOST_THREADS=$threads \"\$prog\" ${c#*|} \$tmp/out" 2>"$tmp/log"
      got=$?
      nrun=$((nrun + 1))
      what="$name ($p, KALDI_GPU_DEV_NO_SIMD=$nosimd, $threads threads)"
      [ "$got" = "$rc" ] || { fail "$what: exit $got, Kaldi's $rc"; cat "$tmp/log"; continue; }
      gsum=$( [ -f "$tmp/out" ] && md5sum <"$tmp/out" | cut -d' ' -f1 || echo none)
      [ "$gsum" = "$sum" ] || fail "$what: statistics differ from Kaldi's"
      if [ "$p/$mode" = "hsw/0 1" ]; then
        if [ "$name" = dim ]; then
          # Kaldi's unwinding adds a WARNING about the killed gunzip; ours
          # stops at the ERROR, as the other programs do
          diff <(kaldi_lines "$tmp/log") <(head -1 "mllt/$name.log") >"$tmp/d" ||
            { fail "$what: log lines differ"; cat "$tmp/d"; }
        else
          diff <(kaldi_lines "$tmp/log") <(sort "mllt/$name.log") >"$tmp/d" ||
            { fail "$what: log lines differ"; head "$tmp/d"; }
        fi
      fi
    done
  done
done
[ "$nrun" -ge 52 ] || fail "only $nrun runs: tests/data/mllt/expect.txt incomplete"
# the profiles must give different statistics (else part 1 tests no switch)
[ "$(grep '^default ' mllt/expect.txt | cut -d' ' -f3 | sort -u | wc -l)" -ge 3 ] ||
  fail "the profiles' expectations are not distinct"

# ali-to-post and weight-silence-post: output bytes, exit status, log lines
for c in "${post_cases[@]}"; do
  name=${c%%|*}
  read -r _ sum rc < <(grep "^$name " mllt/expect-post.txt)
  rm -f "$tmp/out"
  eval "\"\$BIN/\"${c#*|} $(post_wspec "$name" "$tmp/out")" 2>"$tmp/log"
  got=$?
  [ "$got" = "$rc" ] || { fail "$name: exit $got, Kaldi's $rc"; cat "$tmp/log"; continue; }
  gsum=$( [ -s "$tmp/out" ] && md5sum <"$tmp/out" | cut -d' ' -f1 || echo none)
  [ "$gsum" = "$sum" ] || fail "$name: output differs from Kaldi's"
  diff <(grep -E "(ali-to-post|weight-silence-post)\.cc:|^(Usage|Apply|Convert)" "$tmp/log" |
           sed 's/\[[^]]*\]//') "mllt/$name.log" >"$tmp/d" || { fail "$name: log lines differ"; cat "$tmp/d"; }
done
# train_lda_mllt.sh's own form: the posteriors on stdin from the shell's
# pipe of ali-to-post and weight-silence-post, all three ours
for p in $(cut -d' ' -f2 mllt/expect.txt | sort -u); do
  read -r _ _ sum _ < <(grep "^postpipe $p " mllt/expect.txt)
  KALDI_GPU_BLAS_PROFILE=$p PATH="$BIN:$PATH" bash -c "ali-to-post 'ark:gunzip -c mllt/tri2-ali.gz|' ark:- |
    weight-silence-post 0.0 $sil_list models/tri2/final.mdl ark:- ark:- |
    gmm-acc-mllt --rand-prune=4.0 models/tri2/final.mdl ark:feats/lda.ark ark,s,o,cs:- $tmp/out" \
    2>"$tmp/log" || { fail "stock form ($p): failed"; cat "$tmp/log"; continue; }
  [ "$(md5sum <"$tmp/out" | cut -d' ' -f1)" = "$sum" ] || fail "stock form ($p): statistics differ"
  [ "$(grep -c "GPU plugin program" "$tmp/log")" = 3 ] || fail "stock form ($p): not our three programs"
done

# the steps scripts' posteriors pipe ran in-process (not Kaldi's programs),
# and with KALDI_GPU_FEATS_PIPE=0 it would not have been
c=$(printf '%s\n' "${mllt_cases[@]}" | grep '^postpipe|')
eval "\"\$prog\" --verbose=1 ${c#*|} \$tmp/out" 2>"$tmp/log"
grep -q "Posteriors computed in-process" "$tmp/log" || fail "postpipe: the pipe did not run in-process"
eval "KALDI_GPU_FEATS_PIPE=0 PATH=/nonexistent:/usr/bin:/bin \"\$prog\" --verbose=1 ${c#*|} \$tmp/out" \
  2>"$tmp/log"
grep -q "Posteriors computed in-process" "$tmp/log" && fail "postpipe: in-process with KALDI_GPU_FEATS_PIPE=0"

# a transition-id past the model's: Kaldi asserts (134); ours is an ERROR
awk 'NR == 2 { sub(/\[ [0-9]+ 1 \]/, "[ 99999 1 ]") } { print }' "$tmp/post.txt" >"$tmp/badtid.txt"
rm -f "$tmp/out"
"$prog" models/tri2/final.mdl ark:feats/lda.ark "ark,t:$tmp/badtid.txt" "$tmp/out" 2>"$tmp/log"
rc=$?
[ "$rc" = 255 ] || fail "bad transition-id: exit $rc, want 255"
grep -q "^ERROR .*Transition-id 99999 out of range .* en-029-f1-00035" "$tmp/log" ||
  { fail "bad transition-id: no ERROR naming the utterance"; cat "$tmp/log"; }
[ -e "$tmp/out" ] && fail "bad transition-id: statistics written"
# a posteriors archive that is not one
printf 'utt1 [ 3 x ]\n' >"$tmp/bad.txt"
"$prog" models/tri2/final.mdl ark:feats/lda.ark "ark,t:$tmp/bad.txt" "$tmp/out" 2>"$tmp/log"
rc=$?
[ "$rc" = 255 ] || fail "bad posteriors: exit $rc, want 255"
grep -q "^ERROR" "$tmp/log" || { fail "bad posteriors: no ERROR"; cat "$tmp/log"; }

# 2. against the bundle's gmm-acc-mllt on this CPU
. "$TOP/tests/cli/lib/kaldi-bundle.sh"
kb=$(find_kaldi_bundle "$tmp")
if [ -n "$kb" ] && [ -x "$kb/bin/gmm-acc-mllt" ]; then
  for c in "${mllt_cases[@]}"; do
    name=${c%%|*}
    case $name in default|stage|pipe|text|postpipe|wsp01) ;; *) continue ;; esac
    eval "PATH=\"\$kb/bin:\$PATH\" LD_LIBRARY_PATH=\"\$kb/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\" \
      \"\$kb/bin/gmm-acc-mllt\" ${c#*|} \$tmp/kaldi" 2>"$tmp/klog" ||
      { fail "$name: Kaldi's gmm-acc-mllt failed"; cat "$tmp/klog"; continue; }
    eval "env -u KALDI_GPU_BLAS_PROFILE PATH=\"\$kb/bin:\$PATH\" \"\$prog\" ${c#*|} \$tmp/ours" \
      2>"$tmp/log" || { fail "$name (bundle): ours failed"; cat "$tmp/log"; continue; }
    cmp -s "$tmp/kaldi" "$tmp/ours" || fail "$name: statistics differ from the bundle's on this CPU"
    # the real pipes (KALDI_GPU_FEATS_PIPE=0: Kaldi's feature and posterior programs)
    eval "env -u KALDI_GPU_BLAS_PROFILE KALDI_GPU_FEATS_PIPE=0 PATH=\"\$kb/bin:\$PATH\" \
      \"\$prog\" ${c#*|} \$tmp/ours2" 2>"$tmp/log2" || { fail "$name (real pipes): ours failed"; continue; }
    cmp -s "$tmp/kaldi" "$tmp/ours2" || fail "$name: statistics with the real pipes differ"
    diff <(kaldi_lines "$tmp/klog") <(kaldi_lines "$tmp/log") >/dev/null ||
      fail "$name: log lines differ from the bundle's"
  done
else
  echo "mllt: NOTE: no Kaldi bundle; part 2 (this CPU against Kaldi run now) not run"
fi
[ "$fails" = 0 ] && echo "mllt: OK ($nrun runs against Kaldi's recorded statistics)"
[ "$fails" = 0 ]
