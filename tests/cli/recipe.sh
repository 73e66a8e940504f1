#!/bin/bash
# A small real recipe, stock Kaldi vs our programs first on PATH: on the 300
# shortest utterances of the synth-s5 corpus, steps/train_mono.sh
# --num-iters 10 then steps/align_si.sh (egs/synth/s5/run.sh stages 1-2,
# --nj 2), once all-Kaldi and once with BIN first on PATH. The two mono
# models must be byte-identical and so must every alignment (mono/ali.*.gz,
# mono_ali/ali.*.gz, gunzipped). Our programs run with their default
# --use-gpu=optional: the CPU path here, the GPU path where one is usable.
# Needs the shared Kaldi bundle and corpus (dev/device/recipe-env.sh finds them;
# or KALDI_BUNDLE = an unpacked bundle, KALDI_BUNDLE_TAR, SYNTH_CORPUS_DIR),
# else SKIP. Nothing is set for the rounding: our programs match the Kaldi
# on the recipe's PATH themselves (base/matrix/blas-profile.h); SKIP when
# that Kaldi's BLAS is not one we reproduce (RECIPE_CHECK_FORCE=1: compare
# anyway).
# Env: BIN = dir of our programs, TOP = repo root. Exit 0 pass, 1 fail, 77 skip.
set -u
: "${BIN:?}" "${TOP:?}"
. "$TOP/tests/cli/lib/recipe-setup.sh"
[ -x "$BIN/gmm-acc-stats-ali" ] || { echo "SKIP: $BIN/gmm-acc-stats-ali not built"; exit 77; }
recipe_inputs
tmp=$(mktemp -d /tmp/recipe-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

recipe_kaldi "$tmp"
recipe_rounding "$tmp"
recipe_corpus "$tmp"
opts=(--work "$tmp" --kaldi-bundle "$kb" --nj 2 --train data/train_300 --mono-utts 300
      --mono-opts "--num-iters 10" --stop-stage 2)
for side in kaldi ours; do
  ko=false; [ $side = kaldi ] && ko=true
  if ! "$TOP/egs/synth/s5/run.sh" "${opts[@]}" --kaldi-only $ko --gpu-bin "$BIN" --exp "exp_$side" \
       >"$tmp/run.$side.log" 2>&1; then
    tail -n 30 "$tmp/run.$side.log"; echo "FAIL: run.sh, $side side"; exit 1
  fi
done
e=$tmp/synth-s5
grep -q "^which gmm-acc-stats-ali: $(cd "$BIN" && pwd)/gmm-acc-stats-ali$" "$e/exp_ours/run_info" ||
  fail "our side did not run our gmm-acc-stats-ali: $(grep 'which gmm-acc' "$e/exp_ours/run_info")"
grep -q "^which gmm-acc-stats-ali: $kb/bin/gmm-acc-stats-ali$" "$e/exp_kaldi/run_info" ||
  fail "Kaldi side did not run Kaldi's gmm-acc-stats-ali"
n=$(ls "$e"/exp_kaldi/mono/log/acc.*.log 2>/dev/null | wc -l)
[ "$n" -eq 18 ] || fail "expected 9 accumulations (iterations 1-9) x 2 jobs of train_mono, found $n logs"
cmp -s "$e/exp_kaldi/mono/final.mdl" "$e/exp_ours/mono/final.mdl" || fail "mono/final.mdl differs from Kaldi's"
for d in mono mono_ali; do
  ka=$(ls "$e/exp_kaldi/$d"/ali.*.gz 2>/dev/null | sort); oa=$(ls "$e/exp_ours/$d"/ali.*.gz 2>/dev/null | sort)
  [ -n "$ka" ] && [ "$(echo "$ka" | wc -l)" -eq 2 ] || { fail "$d: Kaldi wrote no ali.{1,2}.gz"; continue; }
  # shellcheck disable=SC2086
  if ! cmp -s <(gunzip -c $ka) <(gunzip -c $oa); then
    msg=""
    [ -x "$TOP/build/tools/ali-compare" ] &&
      msg=$("$TOP/build/tools/ali-compare" --print-args=false "ark:gunzip -c $(echo $ka)|" "ark:gunzip -c $(echo $oa)|" 2>&1 | paste -sd' ' -)
    fail "$d alignments differ from Kaldi's ${msg:+($msg)}"
  fi
done
u=$(gunzip -c "$e"/exp_ours/mono_ali/ali.*.gz | wc -l)
[ "$u" -ge 290 ] || fail "mono_ali: only $u utterances aligned (of 300)"
[ $fails -eq 0 ] || exit 1
echo "recipe: train_mono (10 iterations) + align_si on 300 utterances: models and $u alignments identical to Kaldi's$note"
