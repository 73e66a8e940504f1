#!/bin/bash
# tools/compare-recipe.sh on two small experiment dirs made here (the files
# egs/synth/s5/run.sh and run.pl leave: run_info, stage_times, models,
# ali.*.gz, job logs with likelihood lines, a decode dir's wer_*). Checked:
# every Markdown table row has as many cells as its header (a "|" in a
# pipeline's programs or a value is escaped), the numbers land in their
# columns, and the plots: drawn beside the report with --out when
# matplotlib is there (PNG files, linked from the report), and a report
# that says why when it is not, or without --out.
# Env: TOP = repo root, TOOLS = dir with ali-compare. Exit 0 pass, 1 fail, 77 skip.
set -u
: "${TOP:?}"
tools=${TOOLS:-$TOP/build/tools}
[ -x "$tools/ali-compare" ] || { echo "SKIP: $tools/ali-compare not built"; exit 77; }
tmp=$(mktemp -d /tmp/compare-report-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

mkexp() {  # DIR SIDE(k|o)
  local e=$1 side=$2
  mkdir -p "$e"/{mono,mono_ali,tri2}/log "$e/tri2/decode"
  printf 'date: today\nhost: h\ncpu: Fast CPU | 2 cores *turbo*\nkaldi: bundle_x\n' >"$e/run_info"
  if [ "$side" = k ]; then printf 'mono 10.5\nmono_ali 3.25\ntri2 40\n' >"$e/stage_times"
  else printf 'mono 5.25\nmono_ali 1\ntri2 20\n' >"$e/stage_times"; fi
  echo same >"$e/mono/final.mdl"; echo "$side" >"$e/tri2/final.mdl"
  local el=6; [ "$side" = o ] && el=2
  for it in 1 2 3; do
    for j in 1 2; do
      v=$(awk -v i=$it -v s=$side 'BEGIN {printf "%.4f", -100 + 5 * i + (s == "o" && i == 3 ? 0.01 : 0)}')
      printf '# gmm-acc-stats-ali ...\nLOG (gmm-acc-stats-ali[5.5]:main():gmm-acc-stats-ali.cc:112) Overall avg like per frame (Gaussian only) = %s over %d frames.\n# Ended (code 0) at now, elapsed time %d seconds\n' \
        "$v" $((1000 * j)) "$el" >"$e/mono/log/acc.$it.$j.log"
    done
  done
  printf '# ali-to-post "ark:gunzip -c exp/tri2/ali.1.gz|" ark:- | weight-silence-post 0.0 1:2 exp/tri2/1.mdl ark:- ark:- | gmm-acc-mllt --rand-prune=4.0 exp/tri2/1.mdl ark:- exp/tri2/1.1.macc\n# Ended (code 0) at now, elapsed time 7 seconds\n' \
    >"$e/tri2/log/macc.1.1.log"
  printf 'utt1 1 2 3 4\nutt2 5 6 7\nutt3 8 9\n' | gzip -c >"$e/mono_ali/ali.1.gz"
  if [ "$side" = k ]; then printf 'utt4 1 1 1 1\n' | gzip -c >"$e/mono_ali/ali.2.gz"
  else printf 'utt4 1 1 2 1\n' | gzip -c >"$e/mono_ali/ali.2.gz"; fi
  printf '%%WER 33.63 [ 1234 / 3669, 12 ins, 34 del, 56 sub ] exp/tri2/decode/wer_10_0.0\n' >"$e/tri2/decode/wer_10_0.0"
}
mkexp "$tmp/exp_kaldi" k
mkexp "$tmp/exp_ours" o

# Every table: rows with the header's number of cells (escaped \| is no
# separator). Prints the offending rows.
tables_ok() {
  awk '/^\|/ { line = $0; gsub(/\\\\/, "", line); gsub(/\\\|/, "", line)
               n = gsub(/\|/, "|", line)
               if (!intab) { intab = 1; want = n; head = $0 }
               else if (n != want) { print "row with " n - 1 " cells under a header of " want - 1 ": " $0; bad = 1 }
               next }
       { intab = 0 }
       END { exit bad }' "$1"
}

TOOLS=$tools "$TOP/tools/compare-recipe.sh" --out "$tmp/report" "$tmp/exp_kaldi" "$tmp/exp_ours" \
  >"$tmp/out.stdout" 2>"$tmp/out.stderr" || { fail "compare-recipe.sh --out failed"; cat "$tmp/out.stderr"; }
r=$tmp/report/report.md
[ -s "$r" ] || { echo "FAIL: no $r"; exit 1; }
[ -s "$tmp/out.stdout" ] && fail "--out: the report also went to stdout"
tables_ok "$r" || fail "a table row has the wrong number of cells"
grep -qF '| ali-to-post \| weight-silence-post \| gmm-acc-mllt | 1 | 7 | 1 | 7 | 1.00 |' "$r" ||
  fail "the pipeline's row is not escaped or its numbers moved: $(grep -F 'ali-to-post' "$r")"
grep -qF '| cpu | Fast CPU \| 2 cores \*turbo\* | Fast CPU \| 2 cores \*turbo\* |' "$r" ||
  fail "run_info value not escaped: $(grep '^| cpu' "$r")"
grep -qF '| mono | 10.5 | 5.25 | 2.00 |' "$r" || fail "stage row: $(grep '^| mono |' "$r")"
grep -qF '| mono\_ali | 4 / 4 | 3 of 4 | 13 | 12 | 92.3077 |' "$r" ||
  fail "alignment row: $(grep 'mono\\_ali |' "$r" | head -1)"
grep -qF '| 3 | -85.00000 | -84.99000 | **differs** |' "$r" || fail "likelihood row of iteration 3"
grep -qF '| 1 | -95.00000 | -95.00000 | same |' "$r" || fail "likelihood row of iteration 1"
grep -qF '\[ 1234 / 3669, 12 ins, 34 del, 56 sub \]' "$r" || fail "WER cell not escaped"

# The plots: with matplotlib (the Python the script would use), drawn.
py=""
for p in python3 /usr/bin/python3; do "$p" -c 'import matplotlib' 2>/dev/null && { py=$p; break; }; done
if [ -n "$py" ]; then
  for f in stage-times likelihoods alignments; do
    [ "$(head -c4 "$tmp/report/$f.png" 2>/dev/null | od -An -c | tr -d ' ')" = '211PNG' ] ||
      fail "$f.png missing or not a PNG"
    grep -q "^!\[[^]]*\]($f.png)$" "$r" || fail "the report does not show $f.png"
  done
  for f in stages likelihoods alignments; do [ -s "$tmp/report/$f.tsv" ] || fail "no $f.tsv"; done
else
  echo "(matplotlib not installed here: only the reports without plots are checked)"
  grep -q 'No plots: matplotlib is not installed' "$r" || fail "no plots and no word why"
fi

# Without matplotlib (a Python that lacks it): the report, saying why.
PYTHON=/bin/false TOOLS=$tools "$TOP/tools/compare-recipe.sh" --out "$tmp/r2" "$tmp/exp_kaldi" "$tmp/exp_ours" \
  >/dev/null 2>"$tmp/r2.err" || { fail "compare-recipe.sh without matplotlib failed"; cat "$tmp/r2.err"; }
grep -q 'No plots: matplotlib is not installed (Debian: python3-matplotlib' "$tmp/r2/report.md" ||
  fail "without matplotlib: the report does not say so"
ls "$tmp/r2"/*.png >/dev/null 2>&1 && fail "without matplotlib: plots appeared"
tables_ok "$tmp/r2/report.md" || fail "without matplotlib: a table row has the wrong number of cells"

# Without --out: the report on stdout, no plots, saying where they would be.
TOOLS=$tools "$TOP/tools/compare-recipe.sh" "$tmp/exp_kaldi" "$tmp/exp_ours" >"$tmp/plain.md" 2>"$tmp/plain.err" ||
  { fail "compare-recipe.sh to stdout failed"; cat "$tmp/plain.err"; }
grep -q 'No plots: they are written beside the report with --out DIR' "$tmp/plain.md" || fail "stdout report: no word on plots"
diff <(sed -n '/^## Wall time per stage/,$p' "$r") <(sed -n '/^## Wall time per stage/,$p' "$tmp/plain.md") >/dev/null ||
  fail "the stdout report's tables differ from the --out report's"

[ $fails -eq 0 ] && echo "compare-recipe report: all checks passed"
[ $fails -eq 0 ]
