#!/bin/bash
# gmm-acc-stats-twofeats against Kaldi's own (gmmbin/gmm-acc-stats-twofeats.cc):
#  1. every case of tests/cli/lib/twofeats-cases.sh for each OpenBLAS profile
#     Kaldi's output was recorded with (tests/data/twofeats/expect.txt, made
#     by dev/oracles/twofeats-refs.sh), forced with KALDI_GPU_BLAS_PROFILE,
#     SIMD and scalar code: the statistics' md5 and the exit status; the log
#     lines as Kaldi's (Haswell); frames naming several pdfs (Kaldi's
#     unordered_map order of ConvertPosteriorToPdfs) included;
#  2. what Kaldi aborts on: features of different lengths (its assertion
#     line, exit 255 here, no output), a transition-id past the model's (an
#     ERROR naming the utterance);
#  3. train_sat.sh's own form: the posteriors on stdin from ali-to-post, the
#     two feature pipes computed in-process;
#  4. with a Kaldi bundle (tests/cli/lib/kaldi-bundle.sh): Kaldi's program
#     run now on this CPU against ours with the profile ours chooses.
# Env: BIN, TOP. Exit 0 pass, 1 fail.
set -u
: "${BIN:?}" "${TOP:?}"
prog="$BIN/gmm-acc-stats-twofeats"
if [ ! -x "$prog" ]; then echo "SKIP: $prog not built"; exit 77; fi
cd "$TOP/tests/data" || exit 1
tmp=$(mktemp -d /tmp/twofeats.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
. "$TOP/tests/cli/lib/twofeats-cases.sh"
twofeats_inputs "$tmp" twofeats
kaldi_lines() {  # sorted: an in-process pipe's last lines come at its end
  grep -E "(gmm-acc-stats-twofeats|ali-to-post|diag-gmm)\.cc:[0-9]+\)|^(Usage|Accumulate)" "$1" |
    sed 's/\[[^]]*\]//' | sort
}
exp=twofeats/expect.txt
nrun=0
for p in $(cut -d' ' -f2 $exp | sort -u); do
  for nosimd in 0 1; do
    for c in "${twofeats_cases[@]}"; do
      name=${c%%|*}
      read -r _ _ sum rc < <(grep "^$name $p " $exp)
      rm -f "$tmp/out"
      eval "KALDI_GPU_BLAS_PROFILE=$p KALDI_GPU_DEV_NO_SIMD=$nosimd \"\$prog\" ${c#*|} \$tmp/out" \
        2>"$tmp/log"
      got=$?
      nrun=$((nrun + 1))
      what="$name ($p, KALDI_GPU_DEV_NO_SIMD=$nosimd)"
      [ "$got" = "$rc" ] || { fail "$what: exit $got, Kaldi's $rc"; tail -5 "$tmp/log"; continue; }
      gsum=$( [ -f "$tmp/out" ] && md5sum <"$tmp/out" | cut -d' ' -f1 || echo none)
      [ "$gsum" = "$sum" ] || fail "$what: statistics differ from Kaldi's"
      if [ "$p/$nosimd" = hsw/0 ]; then
        diff <(kaldi_lines "$tmp/log") <(sort "twofeats/$name.log") >"$tmp/d" ||
          { fail "$what: log lines differ"; head "$tmp/d"; }
      fi
    done
  done
done
[ "$nrun" -ge 104 ] || fail "only $nrun runs: $exp incomplete"
[ "$(grep '^basic ' $exp | cut -d' ' -f3 | sort -u | wc -l)" -ge 3 ] ||
  fail "the profiles' expectations are not distinct"
# the multi case names several pdfs in a frame (else it tests no order)
gunzip -c twofeats/multi.txt.gz | head -1 | grep -qE '\[ [0-9]+ [0-9.e-]+ [0-9]+ [0-9.e-]+ [0-9]+ ' ||
  fail "multi.txt.gz has no frames of several pairs"

# 2. features of different lengths: Kaldi asserts (134); ours says so, exits 255
sed '1s/^\([^ ]* [^ ]*\)$/\1[0:9]/' feats/delta.scp >"$tmp/rows.scp"
rm -f "$tmp/out"
"$prog" models/tri2/final.mdl ark:feats/lda.ark "scp:$tmp/rows.scp" \
  "ark:gunzip -c mllt/allpost.txt.gz|" "$tmp/out" 2>"$tmp/log"
rc=$?
[ "$rc" = 255 ] || fail "rows: exit $rc, want 255"
grep -q '^ASSERTION_FAILED .*gmm-acc-stats-twofeats.cc:94) Assertion failed: (mat1.NumRows() == mat2.NumRows())' \
  "$tmp/log" || { fail "rows: not Kaldi's assertion line"; cat "$tmp/log"; }
[ -e "$tmp/out" ] && fail "rows: statistics written"
awk 'NR == 2 { sub(/\[ [0-9]+ 1 \]/, "[ 99999 1 ]") } { print }' "$tmp/allpost.txt" >"$tmp/badtid.txt"
"$prog" models/tri2/final.mdl ark:feats/lda.ark ark:feats/delta.ark "ark,t:$tmp/badtid.txt" \
  "$tmp/out" 2>"$tmp/log"
rc=$?
[ "$rc" = 255 ] || fail "bad transition-id: exit $rc, want 255"
grep -q "^ERROR .*Transition-id 99999 out of range .* en-029-f1-00035" "$tmp/log" ||
  { fail "bad transition-id: no ERROR naming the utterance"; cat "$tmp/log"; }

# 3. train_sat.sh's form: posteriors on stdin, both feature pipes in-process
for p in $(cut -d' ' -f2 $exp | sort -u); do
  read -r _ _ sum _ < <(grep "^basic $p " $exp)
  KALDI_GPU_BLAS_PROFILE=$p PATH="$BIN:$PATH" bash -c "ali-to-post 'ark:gunzip -c mllt/tri2-ali.gz|' ark:- |
    gmm-acc-stats-twofeats models/tri2/final.mdl ark:feats/lda.ark ark:feats/delta.ark ark,s,cs:- $tmp/out" \
    2>"$tmp/log" || { fail "stdin form ($p): failed"; cat "$tmp/log"; continue; }
  [ "$(md5sum <"$tmp/out" | cut -d' ' -f1)" = "$sum" ] || fail "stdin form ($p): statistics differ"
done
c=$(printf '%s\n' "${twofeats_cases[@]}" | grep '^sat|')
eval "\"\$prog\" --verbose=1 ${c#*|} \$tmp/out" 2>"$tmp/log"
[ "$(grep -c 'Feature pipeline computed in-process' "$tmp/log")" = 2 ] ||
  fail "sat: the two feature pipes did not run in-process"

# 4. against the bundle's program on this CPU
. "$TOP/tests/cli/lib/kaldi-bundle.sh"
kb=$(find_kaldi_bundle "$tmp")
if [ -n "$kb" ] && [ -x "$kb/bin/gmm-acc-stats-twofeats" ]; then
  for c in "${twofeats_cases[@]}"; do
    name=${c%%|*}
    case $name in basic|multi|sat|sil) ;; *) continue ;; esac
    eval "PATH=\"\$kb/bin:\$PATH\" LD_LIBRARY_PATH=\"\$kb/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\" \
      \"\$kb/bin/gmm-acc-stats-twofeats\" ${c#*|} \$tmp/kaldi" 2>"$tmp/klog" ||
      { fail "$name: Kaldi's program failed"; cat "$tmp/klog"; continue; }
    eval "env -u KALDI_GPU_BLAS_PROFILE PATH=\"\$kb/bin:\$PATH\" \"\$prog\" ${c#*|} \$tmp/ours" \
      2>"$tmp/log" || { fail "$name (bundle): ours failed"; cat "$tmp/log"; continue; }
    cmp -s "$tmp/kaldi" "$tmp/ours" || fail "$name: statistics differ from the bundle's on this CPU"
    diff <(kaldi_lines "$tmp/klog") <(kaldi_lines "$tmp/log") >/dev/null ||
      fail "$name: log lines differ from the bundle's"
  done
else
  echo "note: no Kaldi bundle: part 4 (Kaldi run now) not run"
fi
[ "$fails" = 0 ] && echo "PASS: twofeats ($nrun recorded runs)" && exit 0
exit 1
