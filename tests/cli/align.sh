#!/bin/bash
# gmm-align-compiled against Kaldi: replays exactly the commands recorded in
# kaldi/{mono,tri1,tri2}/align*.log, edge/align.log, edge/long.align.log and
# noisy/{mono,tri1}.align*.log, beam-edge/kaldi-beam*.log (outputs redirected to a temp dir) and checks:
# log messages and their order equal Kaldi's (the "Overall log-likelihood"
# value within 1e-4 relative), exit codes equal, alignments agree on >= 99.9%
# of frames with the same utterances (tools/ali-compare), scores within 1e-4
# relative of kaldi/M/scores.txt. Then bad input.
# Env: BIN = directory of the programs, TOP = repo root; optional USE_GPU
# (default no), ALIGN_KEEP (directory to keep our alignments in),
# ALIGN_SKIP_BAD=1 (parity runs only). Exit 0 pass, 1 fail, 77 skip.
set -u
calc() { awk "BEGIN {print $*}"; }
: "${BIN:?}" "${TOP:?}"
BIN=$(cd "$BIN" && pwd) || exit 1
[ -z "${TOOLS:-}" ] || TOOLS=$(cd "$TOOLS" && pwd) || exit 1
USE_GPU=${USE_GPU:-no}
prog="$BIN/gmm-align-compiled"
if [ ! -x "$prog" ]; then echo "SKIP: $prog not built"; exit 77; fi
cmpbin=""
for d in "${TOOLS:-}" "$TOP/build/tools" "$BIN/../build/tools" "$BIN/../tools"; do
  [ -n "$d" ] && [ -x "$d/ali-compare" ] && { cmpbin="$d/ali-compare"; break; }
done
if [ -z "$cmpbin" ]; then echo "SKIP: ali-compare not built (set TOOLS)"; exit 77; fi
cd "$TOP/tests/data" || exit 1
# On PATH, so argv[0] reads as in Kaldi's logs.
export PATH="$BIN:$PATH"
tmp=$(mktemp -d /tmp/align-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
keep=${ALIGN_KEEP:-$tmp}
mkdir -p "$keep"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# Message part of a log ("LEVEL message"), no stack traces, no command line
# (line 1), and without our informational LOG lines that Kaldi does not have
# (which backend aligns; they come from galign_*/kio_cuda_* functions).
norm() {
  awk 'NR == 1 {next}
       /^\[ Stack-Trace: \]$/ {skip=1; next}
       skip && /^$/ {skip=0; next}
       skip {next}
       /^LOG \([^)]*:(galign_|kio_cuda_|kio_blas_)[a-z_]*\(\)/ {next}
       /^LOG \([^)]*:kio_log_ours\(\)/ {next}
       /^(LOG|WARNING|ERROR|ASSERTION_FAILED|VLOG\[[0-9]+\]) \(/ {
         lvl=$1; i=index($0, ") "); print lvl " " substr($0, i + 2); next }
       /^exit=[0-9]+$/ {next}
       {print}' "$1"
}

# Same log up to the floating value of the "Overall log-likelihood" line,
# which must agree within 1e-4 relative.
logs_match() {  # want got
  awk 'NR == FNR {w[FNR] = $0; nw = FNR; next}
       { g[FNR] = $0; ng = FNR }
       END {
         if (nw != ng) { print "line count " ng " vs Kaldi " nw; bad = 1 }
         n = nw < ng ? nw : ng
         for (i = 1; i <= n; i++) {
           if (w[i] == g[i]) continue
           if (w[i] ~ /Overall log-likelihood per frame is/ && g[i] ~ /Overall log-likelihood per frame is/) {
             split(w[i], a, " "); split(g[i], b, " ")
             x = a[7] + 0; y = b[7] + 0; d = x - y; if (d < 0) d = -d
             m = x < 0 ? -x : x
             if (a[9] == b[9] && d <= 1e-4 * m + 1e-30) continue
           }
           print "line " i ": Kaldi: " w[i]; print "line " i ": ours:  " g[i]; bad = 1
         }
         exit bad
       }' "$1" "$2"
}

ali_agree() {  # name kaldi-rspecifier our-rspecifier
  "$cmpbin" --print-args=false "$2" "$3" >"$tmp/$1.cmp" 2>"$tmp/$1.cmp.err" ||
    { fail "$1: ali-compare failed"; cat "$tmp/$1.cmp.err"; return; }
  awk '{v[$1] = $2}
       END { if (v["utterances-first"] != v["utterances-second"] ||
                 v["utterances-first"] != v["utterances-common"]) {
               print "utterance sets differ: Kaldi " v["utterances-first"] ", ours " \
                     v["utterances-second"] ", common " v["utterances-common"]; exit 1 }
             if (v["percent-equal"] + 0 < 99.9) {
               print "frame agreement " v["percent-equal"] "% < 99.9%"; exit 1 }
             if (v["percent-equal"] + 0 < 100) print "note: agreement " v["percent-equal"] "%" }' \
    "$tmp/$1.cmp" >"$tmp/$1.cmpres" || { fail "$1: $(cat "$tmp/$1.cmpres")"; return; }
  cat "$tmp/$1.cmpres" | sed "s/^/$1: /"
}

scores_match() {  # name kaldi-scores our-scores
  awk 'NR == FNR {w[$1] = $2; nw++; next}
       { ng++; if (!($1 in w)) { print "extra key " $1; bad = 1; next }
         x = w[$1] + 0; y = $2 + 0; d = x - y; if (d < 0) d = -d; m = x < 0 ? -x : x
         if (d > 1e-4 * m + 1e-6) { print $1 ": Kaldi " w[$1] ", ours " $2; bad = 1 } }
       END { if (nw != ng) { print "keys: Kaldi " nw ", ours " ng; bad = 1 }; exit bad }' \
    "$2" "$3" >"$tmp/$1.scores.diff" || { fail "$1: scores differ:"; head "$tmp/$1.scores.diff"; }
}

# run_case NAME KALDI_LOG KALDI_ALI_WSPEC [KALDI_SCORES_WSPEC]: replays the
# command on the log's first line with the outputs redirected.
run_case() {
  local name=$1 klog=$2 kali=$3 kscores=${4:-}
  local cmd; cmd=$(head -n 1 "$klog")
  local kfile=${kali#*:}
  local ours="$keep/$name.ali"
  local mycmd=${cmd/ $kali / ${kali%%:*}:$ours }
  [ "$mycmd" != "$cmd" ] || { fail "$name: output $kali not in: $cmd"; return; }
  if [ -n "$kscores" ]; then
    mycmd=${mycmd/ $kscores / ${kscores%%:*}:$tmp/$name.scores }
  fi
  mycmd=${mycmd/#gmm-align-compiled /gmm-align-compiled --use-gpu=$USE_GPU }
  local t0; t0=$(date +%s.%N)
  eval "$mycmd" 2>"$tmp/$name.log"
  local rc=$?
  local t1; t1=$(date +%s.%N)
  local want_rc; want_rc=$(sed -n 's/^exit=\([0-9]*\)$/\1/p' "$klog")
  [ -n "$want_rc" ] || want_rc=0
  [ "$rc" = "$want_rc" ] || { fail "$name: exit $rc, Kaldi $want_rc"; tail -5 "$tmp/$name.log"; }
  norm "$klog" >"$tmp/$name.want"
  norm "$tmp/$name.log" >"$tmp/$name.got"
  logs_match "$tmp/$name.want" "$tmp/$name.got" >"$tmp/$name.diff" ||
    { fail "$name: log differs from $klog:"; head -20 "$tmp/$name.diff"; }
  ali_agree "$name" "ark:$kfile" "ark:$ours"
  [ -n "$kscores" ] && scores_match "$name" "${kscores#*:}" "$tmp/$name.scores"
  printf '%s: %.2f s\n' "$name" "$(calc "$t1 - $t0")"
}

for m in mono tri1 tri2; do
  run_case "$m" "kaldi/$m/align.log" "ark:kaldi/$m/ali.ark" "ark,t:kaldi/$m/scores.txt"
  run_case "$m-careful" "kaldi/$m/align-careful.log" "ark:kaldi/$m/ali-careful.ark"
  run_case "$m-beam200" "kaldi/$m/align-beam200.log" "ark:kaldi/$m/ali-beam200.ark"
done
run_case edge edge/align.log ark:edge/ali.ark
run_case long edge/long.align.log ark,t:edge/long.ali.txt
for m in mono tri1; do
  run_case "noisy-$m" "noisy/$m.align.log" "ark:noisy/$m.ali.ark"
  run_case "noisy-$m-exact" "noisy/$m.align-exact.log" "ark:noisy/$m.ali-exact.ark"
done

# beam-edge: one noisy utterance whose retry decision hangs on the last bits
# of its likelihoods (Kaldi: retried at beam 9, not at 9.9999, 10, 10.5).
cd beam-edge || exit 1
for b in 9 9.9999 10 10.5; do
  run_case "beam-edge-$b" "kaldi-beam$b.log" "ark,t:kaldi-beam$b.ali"
  cmp -s "$keep/beam-edge-$b.ali" "kaldi-beam$b.ali" ||
    fail "beam-edge-$b: text alignment not byte-identical to Kaldi's"
done
cd .. || exit 1

# Other ways in and out: graphs on stdin, features through an scp (and an
# ark,s,cs input pipe), text alignments through an output pipe.
gunzip -c graphs/mono.fsts.gz | gmm-align-compiled --use-gpu=$USE_GPU --transition-scale=1.0 \
  --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40 models/mono/final.mdl \
  ark:- scp:feats/delta.scp "ark,t:|gzip -c >$tmp/io.txt.gz" "ark,t:$tmp/io.scores" 2>"$tmp/io.log"
rc=$?
[ $rc = 0 ] || fail "stdin graphs + scp features + output pipe: exit $rc"
ali_agree io ark:kaldi/mono/ali.txt "ark:gunzip -c $tmp/io.txt.gz|"
scores_match io kaldi/mono/scores.txt "$tmp/io.scores"
gunzip -c "$tmp/io.txt.gz" | cmp -s - kaldi/mono/ali.txt && echo "io: text alignments byte-identical to Kaldi's"
gmm-align-compiled --use-gpu=$USE_GPU --transition-scale=1.0 --acoustic-scale=0.1 \
  --self-loop-scale=0.1 --beam=10 --retry-beam=40 models/tri2/final.mdl \
  "ark:gunzip -c graphs/tri2.fsts.gz|" "ark,s,cs:cat feats/lda.ark|" "ark:$tmp/io2.ark" 2>"$tmp/io2.log"
rc=$?
[ $rc = 0 ] || fail "ark,s,cs feature pipe: exit $rc"
ali_agree io2 ark:kaldi/tri2/ali.ark "ark:$tmp/io2.ark"

if [ "${ALIGN_SKIP_BAD:-0}" != 1 ]; then
  opts="--use-gpu=$USE_GPU --transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1"
  g="ark:gunzip -c graphs/mono.fsts.gz|"

  # Missing model: one ERROR line, exit 255, no C++ runtime text.
  gmm-align-compiled $opts models/none.mdl "$g" ark:feats/delta.ark "ark:$tmp/x.ark" \
    2>"$tmp/nomodel.log"
  rc=$?
  [ $rc = 255 ] || fail "missing model: exit $rc, want 255"
  [ "$(grep -c '^ERROR (' "$tmp/nomodel.log")" = 1 ] || fail "missing model: want one ERROR line"
  ! grep -q -E 'KaldiFatalError|terminate called|what\(\)' "$tmp/nomodel.log" || fail "missing model: C++ runtime text"

  # Wrong argument count: usage, exit 1; --help: exit 0.
  gmm-align-compiled models/mono/final.mdl "$g" ark:feats/delta.ark >"$tmp/usage.out" 2>&1
  rc=$?
  [ $rc = 1 ] || fail "three arguments: exit $rc, want 1"
  grep -q 'Usage:   gmm-align-compiled \[options\] <model-in>' "$tmp/usage.out" ||
    fail "three arguments: no usage text"
  for o in beam retry-beam careful transition-scale self-loop-scale acoustic-scale \
           write-per-frame-acoustic-loglikes use-gpu batch-size; do
    grep -q -- "--$o " "$tmp/usage.out" || fail "usage does not list --$o"
  done
  grep -q -- '--beam  *: Decoding beam used in alignment (float, default = 200)' "$tmp/usage.out" ||
    fail "usage: --beam line differs from Kaldi's"
  gmm-align-compiled a b c d e f >/dev/null 2>&1
  rc=$?
  [ $rc = 1 ] || fail "six arguments: exit $rc, want 1"
  gmm-align-compiled --help >"$tmp/help.out" 2>&1
  rc=$?
  [ $rc = 0 ] || fail "--help: exit $rc, want 0"

  # Unknown option: fatal (255) with an ERROR line.
  gmm-align-compiled --no-such-option=1 a b c d >"$tmp/unknown.out" 2>&1
  rc=$?
  [ $rc = 255 ] || fail "unknown option: exit $rc, want 255"
  grep -q '^ERROR (' "$tmp/unknown.out" || fail "unknown option: no ERROR line"
  gmm-align-compiled --use-gpu=maybe models/mono/final.mdl "$g" ark:feats/delta.ark \
    "ark:$tmp/x.ark" >"$tmp/badgpu.out" 2>&1
  rc=$?
  [ $rc = 255 ] || fail "--use-gpu=maybe: exit $rc, want 255"

  # Beams that make no sense: fatal at the first utterance, after its LOG line.
  gmm-align-compiled $opts --beam=10 --retry-beam=5 models/mono/final.mdl "$g" \
    ark:feats/delta.ark "ark:$tmp/x.ark" 2>"$tmp/beams.log"
  rc=$?
  [ $rc = 255 ] || fail "beams: exit $rc, want 255"
  norm "$tmp/beams.log" | grep -v '^$' | head -2 >"$tmp/beams.got"
  printf '%s\n' "LOG en-029-f1-00014" \
    "ERROR Beams do not make sense: beam 10, retry-beam 5" >"$tmp/beams.want"
  diff "$tmp/beams.want" "$tmp/beams.got" >/dev/null ||
    { fail "beams: messages differ:"; cat "$tmp/beams.got"; }
  ! grep -q -E 'KaldiFatalError|terminate called|what\(\)' "$tmp/beams.log" || fail "beams: C++ runtime text"

  # tri2 graphs with the mono model: transition-ids beyond the model's.
  gmm-align-compiled $opts --beam=10 --retry-beam=40 models/mono/final.mdl \
    "ark:gunzip -c graphs/tri2.fsts.gz|" ark:feats/delta.ark "ark:$tmp/x.ark" 2>"$tmp/tids.log"
  rc=$?
  [ $rc = 255 ] || fail "tri2 graphs + mono model: exit $rc, want 255"
  grep -q '^ERROR (.*) AddTransitionProbs: invalid symbol [0-9]* on graph input side\.' \
    "$tmp/tids.log" || { fail "tri2 graphs + mono model: no AddTransitionProbs error"; tail -3 "$tmp/tids.log"; }

  # Features of the wrong dimension (lda, 40) for the mono model (39).
  gmm-align-compiled $opts --beam=10 --retry-beam=40 models/mono/final.mdl "$g" \
    ark:feats/lda.ark "ark:$tmp/x.ark" 2>"$tmp/dim.log"
  rc=$?
  [ $rc = 255 ] || fail "dim mismatch: exit $rc, want 255"
  norm "$tmp/dim.log" | grep -v '^$' | head -1 | grep -qx 'LOG en-029-f1-00014' ||
    fail "dim mismatch: first message is not the first utterance's LOG line"
  [ "$(grep -c '^ERROR (' "$tmp/dim.log")" = 1 ] || fail "dim mismatch: want one ERROR line"

  # A fatal error in the middle of a batch comes after the messages of the
  # utterances before it, as in Kaldi's one-at-a-time loop: the third graph
  # from tri2 (transition-ids beyond the mono model's), or the third
  # utterance's features from lda (dim 40); batch sizes 1024 and 2.
  rep="$(dirname "$cmpbin")/replicate-archive"
  if [ -x "$rep" ]; then
    para() { awk -v sel="$1" 'BEGIN {RS = ""; ORS = "\n\n"} (sel == "lt3" && NR < 3) ||
             (sel == "eq3" && NR == 3) || (sel == "gt3" && NR > 3)' "$2"; }
    ent() { awk -v sel="$1" '/^en-029-/ {n++} (sel == "lt3" && n < 3) ||
             (sel == "eq3" && n == 3) || (sel == "gt3" && n > 3)' "$2"; }
    for m in mono tri2; do
      "$rep" --print-args=false --type=fst "ark:gunzip -c graphs/$m.fsts.gz|" ark,t:- 2>/dev/null |
        sed 's/^r000-//' >"$tmp/$m.fsts.txt"
    done
    for f in delta lda; do
      "$rep" --print-args=false "ark:feats/$f.ark" ark,t:- 2>/dev/null | sed 's/^r000-//' >"$tmp/$f.txt"
    done
    { para lt3 "$tmp/mono.fsts.txt"; para eq3 "$tmp/tri2.fsts.txt"; para gt3 "$tmp/mono.fsts.txt"; } \
      >"$tmp/mixg.txt"
    { ent lt3 "$tmp/delta.txt"; ent eq3 "$tmp/lda.txt"; ent gt3 "$tmp/delta.txt"; } >"$tmp/mixf.txt"
    for bs in 1024 2; do
      gmm-align-compiled $opts --batch-size=$bs models/mono/final.mdl "ark:$tmp/mixg.txt" \
        ark:feats/delta.ark "ark:$tmp/x.ark" 2>"$tmp/mixg.log"
      rc=$?
      [ $rc = 255 ] || fail "bad third graph (batch $bs): exit $rc, want 255"
      norm "$tmp/mixg.log" | grep -v '^$' | sed 's/invalid symbol [0-9]*/invalid symbol N/' >"$tmp/mixg.got"
      printf '%s\n' "LOG en-029-f1-00014" "LOG en-029-f1-00035" \
        "ERROR AddTransitionProbs: invalid symbol N on graph input side." >"$tmp/mixg.want"
      diff "$tmp/mixg.want" "$tmp/mixg.got" >/dev/null ||
        { fail "bad third graph (batch $bs): messages differ:"; cat "$tmp/mixg.got"; }
      gmm-align-compiled $opts --batch-size=$bs models/mono/final.mdl "$g" "ark:$tmp/mixf.txt" \
        "ark:$tmp/x.ark" 2>"$tmp/mixf.log"
      rc=$?
      [ $rc = 255 ] || fail "bad third features (batch $bs): exit $rc, want 255"
      norm "$tmp/mixf.log" | grep -v '^$' >"$tmp/mixf.got"
      printf '%s\n' "LOG en-029-f1-00014" "LOG en-029-f1-00035" "LOG en-029-f1-00056" \
        "ERROR Dim mismatch: data dim = 40 vs. model dim = 39" >"$tmp/mixf.want"
      diff "$tmp/mixf.want" "$tmp/mixf.got" >/dev/null ||
        { fail "bad third features (batch $bs): messages differ:"; cat "$tmp/mixf.got"; }
    done
  else
    echo "note: $rep not built: mid-batch fatal error checks skipped"
  fi

  # Truncated features archive: the utterances after the cut have no
  # features; the read error is reported when the reader is closed, after
  # the summary lines: a fatal error (255; Kaldi's destructor aborts, 134).
  # What becomes of the outputs: tests/cli/fatal.sh.
  head -c 1500000 feats/delta.ark >"$tmp/trunc.ark"
  gmm-align-compiled $opts --beam=10 --retry-beam=40 models/mono/final.mdl "$g" \
    "ark:$tmp/trunc.ark" "ark:$tmp/x.ark" 2>"$tmp/trunc.log"
  rc=$?
  [ $rc = 255 ] || { fail "truncated features: exit $rc, want 255"; tail -5 "$tmp/trunc.log"; }
  grep -q 'WARNING .*No features for utterance en-029-f1-00833' "$tmp/trunc.log" ||
    fail "truncated features: no warning for the last utterance"
  awk '/Done [0-9]+, errors on/ {d=NR} /^ERROR \(/ {e=NR} END {exit !(d && e > d)}' \
    "$tmp/trunc.log" || fail "truncated features: no ERROR after the summary lines"

  # A failing graphs pipe: same (ERROR at close, after the summary, 255).
  gmm-align-compiled $opts --beam=10 --retry-beam=40 models/mono/final.mdl \
    "ark:gunzip -c graphs/mono.fsts.gz; exit 3|" ark:feats/delta.ark "ark:$tmp/x.ark" \
    2>"$tmp/pipe.log"
  rc=$?
  [ $rc = 255 ] || { fail "failing graphs pipe: exit $rc, want 255"; tail -5 "$tmp/pipe.log"; }

  # Per-frame acoustic log-likelihoods: one vector per aligned utterance,
  # as long as the utterance.
  gmm-align-compiled $opts --beam=10 --retry-beam=40 \
    "--write-per-frame-acoustic-loglikes=ark,t:$tmp/pf.txt" models/mono/final.mdl \
    "ark:gunzip -c edge/mono.fsts.gz|" ark:edge/feats.ark "ark:$tmp/x.ark" 2>"$tmp/pf.log"
  rc=$?
  [ $rc = 0 ] || fail "per-frame loglikes: exit $rc, want 0"
  n=$(grep -c '\[' "$tmp/pf.txt" 2>/dev/null)
  [ "$n" = 1 ] || fail "per-frame loglikes: $n vectors, want 1"
  len=$(awk '{print NF - 3}' "$tmp/pf.txt" 2>/dev/null)
  [ "$len" = 447 ] || fail "per-frame loglikes: length $len, want 447"

  # Batch size only affects speed: batch of 3 gives the same alignments.
  gmm-align-compiled $opts --batch-size=3 --beam=10 --retry-beam=40 models/mono/final.mdl "$g" \
    ark:noisy/delta.ark "ark:$tmp/b3.ark" 2>"$tmp/b3.log"
  cmp -s "$tmp/b3.ark" "$keep/noisy-mono.ali" || fail "--batch-size=3 changes the alignments"
fi

if [ $fails -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "all gmm-align-compiled checks passed (use-gpu=$USE_GPU)"
exit 0
