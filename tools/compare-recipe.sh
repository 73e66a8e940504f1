#!/bin/bash
# Compare a recipe run with stock Kaldi against the same recipe with our
# programs, as one markdown report on stdout:
#   tools/compare-recipe.sh [--out DIR] EXP_KALDI EXP_OURS > report.md
#   tools/compare-recipe.sh [--out DIR] --run [egs/synth/s5/run.sh options] > report.md
#     (--run: runs egs/synth/s5/run.sh --kaldi-only true --exp exp_kaldi, then
#     the same with our programs --exp exp_ours, one after the other in the
#     same corpus copy; their progress goes to stderr; then reports)
#   --out DIR: the report goes to DIR/report.md instead, with its plots
#     beside it (tools/recipe-plots.py: stage wall time Kaldi vs ours,
#     per-iteration likelihood of both runs, alignment agreement per stage;
#     PNG, matplotlib: python3-matplotlib, tools/install-deps.sh) and the
#     plotted numbers (*.tsv). Without matplotlib the report says so.
# The report: the two runs' set-up (EXP/run_info); per-stage wall time (from
# EXP/stage_times: Kaldi, ours, Kaldi/ours); whether each model file is
# byte-identical; agreement of the alignments of every dir with ali.*.gz
# (utterances and frames identical; needs build/tools/ali-compare, else a
# byte comparison); per-iteration "Overall avg like per frame" of the
# training accumulations and the align logs' log-likelihood, side by side;
# the best WER of every decode dir; where the time goes (every run.pl job
# log's elapsed seconds, summed by the programs of its command line).
# Table cells are escaped for Markdown (a "|" in a pipeline's programs would
# otherwise split the cell).
# Env: TOOLS (dir with ali-compare; default build/tools, then .carry/build/tools);
# PYTHON (the python3 with matplotlib; default: python3, else /usr/bin/python3).
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
out=""
if [ "${1:-}" = --out ]; then
  [ $# -ge 2 ] || { echo "compare-recipe.sh: --out needs a directory" >&2; exit 1; }
  out=$2; shift 2
  mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 1
fi
if [ "${1:-}" = --run ]; then
  shift
  work=$top/egs/synth/s5/work
  a=("$@"); for ((i = 0; i < ${#a[@]} - 1; i++)); do [ "${a[i]}" = --work ] && work=${a[i+1]}; done
  mkdir -p "$work"; work=$(cd "$work" && pwd)
  "$top/egs/synth/s5/run.sh" "$@" --kaldi-only true --exp "$work/synth-s5/exp_kaldi" >&2 || exit 1
  "$top/egs/synth/s5/run.sh" "$@" --kaldi-only false --exp "$work/synth-s5/exp_ours" >&2 || exit 1
  exec "$0" ${out:+--out "$out"} "$work/synth-s5/exp_kaldi" "$work/synth-s5/exp_ours"
fi
[ $# -eq 2 ] && [ -d "$1" ] && [ -d "$2" ] || { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 1; }
K=$(cd "$1" && pwd); O=$(cd "$2" && pwd)
# The plotted numbers: DIR/*.tsv with --out, else a temporary directory.
data=$out
[ -n "$data" ] || { data=$(mktemp -d) && trap 'rm -rf "$data"' EXIT; } || exit 1
if [ -n "$out" ]; then exec >"$out/report.md" || exit 1; fi
# A table cell: Markdown's special characters escaped.
md() { printf '%s' "$1" | sed -e 's/[\\`*_|<[~]/\\&/g' -e 's/]/\\]/g'; }
tools=${TOOLS:-}
[ -n "$tools" ] || for t in "$top/build/tools" "$top/.carry/build/tools"; do [ -x "$t/ali-compare" ] && { tools=$t; break; }; done
ratio() { awk -v k="$1" -v o="$2" 'BEGIN { if (k == "" || o == "" || o + 0 == 0) print "-"; else printf "%.2f", k / o }'; }

echo "# Recipe: stock Kaldi vs our programs"
echo
echo "Kaldi: \`$K\`; ours: \`$O\`."
echo
echo "| | Kaldi side | our side |"
echo "|---|---|---|"
for key in date host nproc cpu gpu kaldi options "which gmm-acc-stats-ali" "which gmm-align-compiled" "which gmm-est" rounding; do
  kv=$(sed -n "s/^$key: //p" "$K/run_info" 2>/dev/null | head -1)
  ov=$(sed -n "s/^$key: //p" "$O/run_info" 2>/dev/null | head -1)
  echo "| $(md "$key") | $(md "${kv:--}") | $(md "${ov:--}") |"
done

# The tables (they write the plotted numbers), then the plots above them.
{
echo
echo "## Wall time per stage"
echo
echo "| stage | Kaldi s | ours s | Kaldi/ours |"
echo "|---|---:|---:|---:|"
stages=$(cat "$K/stage_times" "$O/stage_times" 2>/dev/null | awk '!seen[$1]++ {print $1}')
tk=0; to=0
printf 'stage\tkaldi_s\tours_s\n' >"$data/stages.tsv"
for s in $stages; do
  k=$(awk -v s="$s" '$1 == s {v = $2} END {print v}' "$K/stage_times" 2>/dev/null)
  o=$(awk -v s="$s" '$1 == s {v = $2} END {print v}' "$O/stage_times" 2>/dev/null)
  echo "| $(md "$s") | ${k:--} | ${o:--} | $(ratio "$k" "$o") |"
  printf '%s\t%s\t%s\n' "$s" "$k" "$o" >>"$data/stages.tsv"
  if [ -n "$k" ] && [ -n "$o" ]; then tk=$(awk -v a="$tk" -v b="$k" 'BEGIN {print a + b}'); to=$(awk -v a="$to" -v b="$o" 'BEGIN {print a + b}'); fi
done
echo "| **all (stages run both ways)** | $tk | $to | $(ratio "$tk" "$to") |"

echo
echo "## Models"
echo
echo "| dir | file | identical bytes |"
echo "|---|---|---|"
for d in "$K"/*/; do
  d=$(basename "$d")
  for f in final.mdl final.alimdl final.mat tree; do
    [ -f "$K/$d/$f" ] || continue
    if [ ! -f "$O/$d/$f" ]; then r="(missing on our side)"
    elif cmp -s "$K/$d/$f" "$O/$d/$f"; then r=yes
    else r="no: $(cmp "$K/$d/$f" "$O/$d/$f" 2>&1 | sed 's/.*: //' | head -1)"; fi
    echo "| $(md "$d") | $(md "$f") | $(md "$r") |"
  done
done

echo
echo "## Alignments (every dir with ali.*.gz; *_ali = align_si output)"
echo
[ -n "$tools" ] || echo "(no ali-compare built: byte comparison of the gunzipped archives only)"
[ -n "$tools" ] || echo
echo "| dir | utterances Kaldi / ours | utterances identical | frames compared | frames identical | % frames |"
echo "|---|---:|---:|---:|---:|---:|"
printf 'dir\tutterances\tutterances_identical\tframes\tframes_identical\n' >"$data/alignments.tsv"
for d in "$K"/*/; do
  d=$(basename "$d")
  [ -f "$K/$d/ali.1.gz" ] || continue
  if [ ! -f "$O/$d/ali.1.gz" ]; then echo "| $(md "$d") | (missing on our side) | | | | |"; continue; fi
  kl=$(ls "$K/$d"/ali.*.gz | sort -t. -k2 -n | tr '\n' ' '); ol=$(ls "$O/$d"/ali.*.gz | sort -t. -k2 -n | tr '\n' ' ')
  if [ -n "$tools" ]; then
    # shellcheck disable=SC2086
    "$tools/ali-compare" --print-args=false --print-diffs=true "ark:gunzip -c $kl|" "ark:gunzip -c $ol|" 2>/dev/null |
      awk -v d="$(md "$d")" -v raw="$d" -v tsv="$data/alignments.tsv" '$1 == "diff" {nd++} $1 != "diff" {v[$1] = $2}
        END {printf "| %s | %d / %d | %d of %d | %d | %d | %s |\n", d, v["utterances-first"], v["utterances-second"],
             v["utterances-common"] - nd, v["utterances-common"], v["frames-compared"], v["frames-equal"], v["percent-equal"]
             printf "%s\t%d\t%d\t%d\t%d\n", raw, v["utterances-common"], v["utterances-common"] - nd,
               v["frames-compared"], v["frames-equal"] >>tsv}'
  else
    # shellcheck disable=SC2086
    if cmp -s <(gunzip -c $kl) <(gunzip -c $ol); then r="all (identical bytes)"; else r="**differ**"; fi
    echo "| $(md "$d") | | $r | | | |"
  fi
done

echo
echo "## Likelihoods per iteration"
echo
echo "Frame-weighted over the jobs: \"Overall avg like per frame (Gaussian only)\" of the accumulation"
echo "(acc.ITER.*.log) and \"Overall log-likelihood per frame\" of the alignment (align.ITER.*.log,"
echo "align.*.log in *_ali dirs). \"same\" = every job's printed value identical on both sides."
perl -e '
  use strict; use warnings;
  my ($K, $O, $tsv) = @ARGV;
  sub md { my $s = shift; $s =~ s/([\\`*_|<\[\]~])/\\$1/g; $s }
  open(my $t, ">", $tsv) or die "$tsv: $!";
  print $t "dir\tkind\titer\tkaldi\tours\n";
  sub scan {  # dir -> { "acc ITER" or "align ITER" => [sum like*frames, frames, joined text] }
    my ($dir) = @_; my %r;
    opendir(my $dh, "$dir/log") or return \%r;
    for my $f (sort readdir $dh) {
      my ($kind, $it);
      if ($f =~ /^acc\.(\d+)\.\d+\.log$/) { ($kind, $it) = ("acc", $1) }
      elsif ($f =~ /^align\.(\d+)\.\d+\.log$/) { ($kind, $it) = ("align", $1) }
      elsif ($f =~ /^align\.\d+\.log$/) { ($kind, $it) = ("align", "-") }
      else { next }
      open(my $fh, "<", "$dir/log/$f") or next;
      while (<$fh>) {
        if (/Overall (?:avg like per frame \(Gaussian only\) =|log-likelihood per frame is) (\S+) over (\d+) frames/) {
          my $e = ($r{"$kind $it"} //= [0, 0, {}]);
          $e->[0] += $1 * $2; $e->[1] += $2; $e->[2]{$f} = "$1/$2";
        }
      }
    }
    return \%r;
  }
  opendir(my $dh, $K) or die; my @dirs = sort grep { -d "$K/$_/log" } readdir $dh;
  for my $d (@dirs) {
    my ($k, $o) = (scan("$K/$d"), scan("$O/$d"));
    next unless %$k;
    my %its; for (keys %$k, keys %$o) { my ($kind, $it) = split / /; $its{$it} = 1 }
    print "\n### ", md($d), "\n\n| iter | acc Kaldi | acc ours | acc | align Kaldi | align ours | align |\n|---:|---:|---:|---|---:|---:|---|\n";
    for my $it (sort { ($a eq "-" ? -1 : $a) <=> ($b eq "-" ? -1 : $b) } keys %its) {
      my @c = ($it);
      for my $kind ("acc", "align") {
        my ($x, $y) = ($k->{"$kind $it"}, $o->{"$kind $it"});
        my $v = sub { my $e = shift; $e && $e->[1] ? sprintf("%.5f", $e->[0] / $e->[1]) : "" };
        my $same = "";
        if ($x && $y) {
          my $sx = join(",", map { "$_=$x->[2]{$_}" } sort keys %{$x->[2]});
          my $sy = join(",", map { "$_=$y->[2]{$_}" } sort keys %{$y->[2]});
          $same = $sx eq $sy ? "same" : "**differs**";
        }
        push @c, $v->($x), $v->($y), $same;
        print $t join("\t", $d, $kind, $it, $v->($x), $v->($y)), "\n" if $x || $y;
      }
      print "| ", join(" | ", @c), " |\n";
    }
  }
  close($t);' "$K" "$O" "$data/likelihoods.tsv"

echo
echo "## WER (best over LM weights and penalties, utils/best_wer.sh)"
echo
echo "| decode dir | Kaldi | ours |"
echo "|---|---|---|"
best() {  # lowest %WER over DIR/wer_*, as "%WER W [ ... ] wer_LMWT_PENALTY"
  grep -H '%WER' "$1"/wer_* 2>/dev/null | sed 's|^.*/\(wer_[^:]*\):\(.*\)$|\2 \1|' |
    awk '(b == "" || $2 + 0 < b + 0) {b = $2; l = $0} END {print l}' | sed 's/  */ /g'
}
for d in "$K"/*/decode*/; do
  [ -d "$d" ] || continue
  r=${d#"$K"/}; r=${r%/}
  echo "| $(md "$r") | $(md "$(best "$K/$r")") | $(md "$(best "$O/$r")") |"
done

echo
echo "## Where the time goes"
echo
echo "Every run.pl job log (EXP/*/log/*.log, also under decode dirs): its \"elapsed time\" (whole seconds,"
echo "as run.pl writes it), summed by the programs of its command line (shell and text tools left out)."
echo "Jobs run nj at a time, so these sums are CPU-side job time, not wall time."
echo
perl -e '
  use strict; use warnings;
  my ($K, $O) = @ARGV; my (%t, %n);
  sub md { my $s = shift; $s =~ s/([\\`*_|<\[\]~])/\\$1/g; $s }
  my %skip = map { $_ => 1 } qw(set cd export true sed awk sort uniq gzip cat head tail cut grep perl tr paste);
  for my $side ([$K, 0], [$O, 1]) {
    my @logs = split /\n/, `find "$side->[0]" -path "*/log/*.log" -type f`;
    for my $f (@logs) {
      open(my $fh, "<", $f) or next;
      my $first = <$fh> // ""; my $el;
      while (<$fh>) { $el = $1 if /^# Ended .*elapsed time (\d+) seconds/ }
      next unless defined $el && $first =~ s/^# //;
      (my $c = $first) =~ s/"[^"]*"|\x27[^\x27]*\x27//g;
      my @p = grep { !$skip{$_} } map { (split " ", $_)[0] // () } map { s/^[\s(]+//r } split /\||&&|;/, $c;
      @p = ((split " ", $first)[0]) unless @p;
      my %u; my $lab = join(" | ", grep { !$u{$_}++ } map { s{.*/}{}r } @p);
      $t{$lab}[$side->[1]] += $el; $n{$lab}[$side->[1]]++;
    }
  }
  print "| programs | Kaldi jobs | Kaldi s | our jobs | ours s | Kaldi/ours |\n|---|---:|---:|---:|---:|---:|\n";
  my @tot = (0, 0);
  for my $l (sort { ($t{$b}[0] // 0) + ($t{$b}[1] // 0) <=> ($t{$a}[0] // 0) + ($t{$a}[1] // 0) || $a cmp $b } keys %t) {
    my ($a, $b) = map { $t{$l}[$_] // 0 } 0, 1; $tot[0] += $a; $tot[1] += $b;
    printf "| %s | %d | %d | %d | %d | %s |\n", md($l), $n{$l}[0] // 0, $a, $n{$l}[1] // 0, $b, $b ? sprintf("%.2f", $a / $b) : "-";
  }
  printf "| **all** | | %d | | %d | %s |\n", @tot, $tot[1] ? sprintf("%.2f", $tot[0] / $tot[1]) : "-";
' "$K" "$O"
} >"$data/tables.md"

echo
echo "## Plots"
echo
py=""
for p in ${PYTHON:-python3 /usr/bin/python3}; do
  "$p" -c 'import matplotlib' 2>/dev/null && { py=$p; break; }
done
if [ -z "$out" ]; then
  echo "No plots: they are written beside the report with --out DIR."
elif [ -z "$py" ]; then
  echo "No plots: matplotlib is not installed (Debian: python3-matplotlib, which tools/install-deps.sh installs)."
elif ! "$py" "$top/tools/recipe-plots.py" "$data" "$out" >"$data/plots.list" 2>"$data/plots.err"; then
  echo "No plots: tools/recipe-plots.py failed: $(tail -1 "$data/plots.err")"
else
  while IFS='|' read -r f title; do
    echo "![$title]($f)"
    echo
  done <"$data/plots.list"
  echo "The plotted numbers: stages.tsv, likelihoods.tsv, alignments.tsv."
fi
cat "$data/tables.md"
[ -z "$out" ] || rm -f "$data/tables.md" "$data/plots.list" "$data/plots.err"
