#!/bin/bash
# gmm-sum-accs, and gmm-est with the steps scripts' "gmm-sum-accs - FILES |"
# statistics (summed in process), against Kaldi:
#  - fixtures: kaldi/mono/sum.acc (Kaldi's gmm-sum-accs of a binary, a text
#    and the binary acc again) byte for byte with the messages of sum.log;
#    gmm-est on "gmm-sum-accs - kaldi/mono/final.acc |" gives kaldi/mono/est.mdl
#    and est.log's messages, after gmm-sum-accs' lines; no gmm-sum-accs on
#    PATH, so the pipe cannot have run;
#  - a glob over 12 accs expanded in the shell's order (1, 10, 11, 12, 2,
#    ...) and summed in process = the same pipe run by the shell (a quoted
#    word: our parser leaves it to popen, with our gmm-sum-accs on PATH):
#    model, occs, messages (float values summed in double rarely depend on
#    the order: the order is checked on the command line echoed);
#  - errors: usage (exit 1), missing file, truncated acc, accs of another
#    model, through gmm-est's pipe too: exit 255, an ERROR naming the file,
#    no output left; 40 damaged accs: an ERROR naming the file or a sum,
#    never a crash;
#  - with the Kaldi bundle (else SKIP of that part): 16 accs of tri1 (15053
#    Gaussians) and 16 of mono made by Kaldi's gmm-acc-stats-ali from the
#    fixtures: gmm-sum-accs' output (binary and text) and messages, and
#    gmm-est with the pipe under several option sets (model, occs, messages;
#    our programs first on PATH, so the rounding must come from Kaldi's
#    gmm-est further on) and on a text acc identical to this host's Kaldi;
#    missing file: both exit 255.
# Env: TOP, BIN. Exit 0 pass, 1 fail, 77 skip.
set -u
: "${TOP:?}" "${BIN:?}"
for p in gmm-sum-accs gmm-est gmm-acc-stats-ali; do
  [ -x "$BIN/$p" ] || { echo "SKIP: $BIN/$p not built"; exit 77; }
done
bin=$(cd "$BIN" && pwd)
tmp=$(mktemp -d /tmp/sum-accs-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# "LEVEL (program) message" of a log, without our first line and the
# rounding line; paths of the outputs cut.
msgs() {
  awk '/kio_log_ours/ || /\) Rounding as / {next}
       /^(LOG|WARNING|ERROR) \(/ { i = index($0, ") "); p = substr($0, index($0, "(") + 1)
         sub(/\[.*/, "", p); print $1 " (" p ") " substr($0, i + 2) }' "$1" |
    sed 's/Written model to .*/Written model/; s/Written stats to [^-].*/Written stats to FILE/'
}
cd "$TOP/tests/data" || exit 1
export KALDI_GPU_BLAS_PROFILE=skx
# no Kaldi or ours on PATH: a pipe that really ran would fail
export PATH=/usr/bin:/bin

# ---- fixtures ----
"$bin/gmm-sum-accs" "$tmp/sum.acc" kaldi/mono/final.acc kaldi/mono/final.txt.acc \
  kaldi/mono/final.acc 2>"$tmp/sum.log" || fail "sum: exit $?: $(tail -n 2 "$tmp/sum.log")"
cmp -s "$tmp/sum.acc" kaldi/mono/sum.acc || fail "sum: differs from kaldi/mono/sum.acc"
diff <(msgs kaldi/mono/sum.log) <(msgs "$tmp/sum.log") >"$tmp/d" ||
  { fail "sum: messages differ from kaldi/mono/sum.log:"; head -n 6 "$tmp/d"; }
head -n 1 "$tmp/sum.log" | grep -q "gmm-sum-accs $tmp/sum.acc kaldi/mono/final.acc " ||
  fail "sum: no command line first"

"$bin/gmm-est" models/mono/final.mdl "gmm-sum-accs - kaldi/mono/final.acc |" "$tmp/e.mdl" \
  2>"$tmp/e.log" || fail "est pipe: exit $?: $(tail -n 2 "$tmp/e.log")"
cmp -s "$tmp/e.mdl" kaldi/mono/est.mdl || fail "est pipe: model differs from kaldi/mono/est.mdl"
n=$(msgs kaldi/mono/est.log | wc -l)
diff <(msgs kaldi/mono/est.log) <(msgs "$tmp/e.log" | tail -n "$n") >"$tmp/d" ||
  { fail "est pipe: messages differ from kaldi/mono/est.log:"; head -n 6 "$tmp/d"; }
# gmm-sum-accs' command line and its three lines before gmm-est's first
grep -v kio_log_ours "$tmp/e.log" | sed -n 2p | grep -qx "gmm-sum-accs - kaldi/mono/final.acc " ||
  fail "est pipe: gmm-sum-accs' command line is not the second line"
msgs "$tmp/e.log" | head -n 3 >"$tmp/head"
grep -q "^LOG (gmm-sum-accs) Summed 1 stats, total count" "$tmp/head" &&
  grep -q "^LOG (gmm-sum-accs) Written stats to -$" "$tmp/head" ||
  { fail "est pipe: gmm-sum-accs' lines are not first:"; cat "$tmp/head"; }

# ---- the glob's order, in process and through the shell ----
mkdir -p "$tmp/g"
for j in $(seq 1 12); do
  # 11 of 12 utterances each: a Gaussian's sum has many terms
  awk -v j=$j 'NR % 12 != j % 12' feats/delta.scp >"$tmp/g/f.$j.scp"
  "$bin/gmm-acc-stats-ali" --use-gpu=no models/mono/final.mdl "scp:$tmp/g/f.$j.scp" \
    ark:kaldi/mono/ali.ark "$tmp/g/1.$j.acc" 2>"$tmp/g/acc.$j.log" ||
    fail "gmm-acc-stats-ali job $j: exit $?"
done
"$bin/gmm-est" --mix-up=400 --write-occs="$tmp/in.occs" models/mono/final.mdl \
  "gmm-sum-accs - $tmp/g/1.*.acc |" "$tmp/in.mdl" 2>"$tmp/in.log" || fail "glob: exit $?"
PATH=$bin:$PATH "$bin/gmm-est" --mix-up=400 --write-occs="$tmp/sh.occs" models/mono/final.mdl \
  "gmm-sum-accs - '$tmp/g'/1.*.acc |" "$tmp/sh.mdl" 2>"$tmp/sh.log" || fail "glob, shell: exit $?"
cmp -s "$tmp/in.mdl" "$tmp/sh.mdl" || fail "glob: model differs from the shell's pipe's"
cmp -s "$tmp/in.occs" "$tmp/sh.occs" || fail "glob: occs differ from the shell's pipe's"
diff <(msgs "$tmp/in.log") <(msgs "$tmp/sh.log") >"$tmp/d" ||
  { fail "glob: messages differ from the shell's pipe's:"; head -n 6 "$tmp/d"; }
grep -q "^gmm-sum-accs - $tmp/g/1.1.acc $tmp/g/1.10.acc $tmp/g/1.11.acc $tmp/g/1.12.acc $tmp/g/1.2.acc " \
  "$tmp/in.log" || fail "glob: not expanded in the shell's order"

# ---- errors ----
"$bin/gmm-sum-accs" "$tmp/x.acc" >/dev/null 2>"$tmp/u.log"; rc=$?
[ $rc -eq 1 ] && grep -q "^Usage: gmm-sum-accs" "$tmp/u.log" || fail "one argument: exit $rc, not 1 with the usage"
"$bin/gmm-est" models/mono/final.mdl >/dev/null 2>"$tmp/u.log"; rc=$?
[ $rc -eq 1 ] && grep -q "^Usage:  gmm-est" "$tmp/u.log" || fail "gmm-est, one argument: exit $rc"
head -c 100000 kaldi/mono/final.acc >"$tmp/cut.acc"
check_err() {  # what, file named, command...
  local what=$1 name=$2
  shift 2
  "$@" >/dev/null 2>"$tmp/err.log"; local rc=$?
  [ $rc -eq 255 ] && grep -q "^ERROR .*$name" "$tmp/err.log" ||
    fail "$what: exit $rc, no ERROR naming $name: $(grep -m1 ERROR "$tmp/err.log")"
  [ ! -e "$tmp/x.out" ] || { fail "$what: an output was left"; rm -f "$tmp/x.out"; }
}
check_err "missing file" no-such.acc "$bin/gmm-sum-accs" "$tmp/x.out" kaldi/mono/final.acc kaldi/mono/no-such.acc
check_err "truncated acc" cut.acc "$bin/gmm-sum-accs" "$tmp/x.out" kaldi/mono/final.acc "$tmp/cut.acc"
check_err "another model's acc" tri2/final.acc "$bin/gmm-sum-accs" "$tmp/x.out" kaldi/mono/final.acc kaldi/tri2/final.acc
check_err "gmm-est, missing file in the pipe" no-such.acc "$bin/gmm-est" models/mono/final.mdl \
  "gmm-sum-accs - kaldi/mono/final.acc kaldi/mono/no-such.acc |" "$tmp/x.out"
grep -q "^ERROR (gmm-sum-accs\[" "$tmp/err.log" || fail "gmm-est pipe: the file's ERROR is not gmm-sum-accs'"
check_err "gmm-est, truncated acc in the pipe" cut.acc "$bin/gmm-est" models/mono/final.mdl \
  "gmm-sum-accs - $tmp/cut.acc |" "$tmp/x.out"

# damaged accs (a byte set to 0xff or 0x00 at 40 places in and after the
# headers of the first GMM accumulators and the totals): an ERROR and 255,
# or a sum (the byte was in a value); never a crash
marks=($(grep -abo -e '<NUMPDFS>' -e '<GMMACCS>' -e '<total_like>' kaldi/mono/final.acc |
         head -n 4 | cut -d: -f1))
errs=0
for i in $(seq 1 40); do
  off=$(( ${marks[i % ${#marks[@]}]} + (i * 7) % 60 ))
  cp kaldi/mono/final.acc "$tmp/dmg.acc"
  if [ $((i % 2)) -eq 0 ]; then b='\377'; else b='\000'; fi
  printf "$b" | dd of="$tmp/dmg.acc" bs=1 seek=$off conv=notrunc 2>/dev/null
  "$bin/gmm-sum-accs" "$tmp/dmg.out" kaldi/mono/final.acc "$tmp/dmg.acc" >/dev/null 2>"$tmp/dmg.log"; rc=$?
  case $rc in
    0) ;;
    255) errs=$((errs + 1))
         grep -q "^ERROR .*dmg.acc" "$tmp/dmg.log" || fail "damaged acc at $off: exit 255 without an ERROR naming it" ;;
    *) fail "damaged acc at $off: exit $rc" ;;
  esac
  rm -f "$tmp/dmg.out"
done
[ $errs -ge 10 ] || fail "damaged accs: only $errs of 40 refused (the damage missed the headers?)"

# ---- against this host's Kaldi ----
. "$TOP/tests/cli/lib/recipe-setup.sh"
recipe_host_kaldi "$tmp"
if [ -n "$host_kaldi" ]; then
  # ours round as the Kaldi on PATH
  kpath=$PATH
  n=0
  for m in tri1 mono; do
    mkdir -p "$tmp/$m"
    for j in $(seq 1 16); do
      awk -v j=$j 'NR % 16 == j % 16' feats/delta.scp >"$tmp/$m/f.$j.scp"
      PATH=$kpath gmm-acc-stats-ali models/$m/final.mdl "scp:$tmp/$m/f.$j.scp" \
        ark:kaldi/$m/ali.ark "$tmp/$m/1.$j.acc" 2>/dev/null || fail "Kaldi's gmm-acc-stats-ali $m $j"
    done
    for b in true false; do
      PATH=$kpath gmm-sum-accs --binary=$b "$tmp/k.acc" "$tmp/$m"/1.*.acc 2>"$tmp/k.log"
      "$bin/gmm-sum-accs" --binary=$b "$tmp/o.acc" "$tmp/$m"/1.*.acc 2>"$tmp/o.log" ||
        fail "$m sum --binary=$b: exit $?"
      cmp -s "$tmp/o.acc" "$tmp/k.acc" || fail "$m sum --binary=$b: differs from Kaldi's"
      diff <(msgs "$tmp/k.log") <(msgs "$tmp/o.log") >"$tmp/d" ||
        { fail "$m sum --binary=$b: messages differ:"; head -n 6 "$tmp/d"; }
    done
    while read -r opts; do
      o=${opts//OCC/$tmp/o.occs}; k=${opts//OCC/$tmp/k.occs}
      # shellcheck disable=SC2086
      PATH=$kpath gmm-est $k models/$m/final.mdl "gmm-sum-accs - $tmp/$m/1.*.acc |" "$tmp/k.mdl" 2>"$tmp/k.log"
      # ours first on PATH, as in a recipe: the rounding still follows Kaldi's
      # shellcheck disable=SC2086
      PATH=$bin:$kpath "$bin/gmm-est" $o models/$m/final.mdl "gmm-sum-accs - $tmp/$m/1.*.acc |" "$tmp/o.mdl" 2>"$tmp/o.log" ||
        fail "$m [$opts]: exit $?"
      cmp -s "$tmp/o.mdl" "$tmp/k.mdl" || fail "$m [$opts]: model differs from Kaldi's"
      diff <(msgs "$tmp/k.log") <(msgs "$tmp/o.log") >"$tmp/d" ||
        { fail "$m [$opts]: messages differ:"; head -n 6 "$tmp/d"; }
      case $opts in *OCC*) cmp -s "$tmp/o.occs" "$tmp/k.occs" || fail "$m [$opts]: occs differ";; esac
      n=$((n + 1))
    done <<'OPTS'
--mix-up=16000 --power=0.25 --write-occs=OCC
--mix-up=2000 --min-gaussian-occupancy=3
--write-occs=OCC
--update-flags=mv --binary=false
OPTS
  done
  # a text statistics file given to gmm-est directly (parsed as double)
  PATH=$kpath gmm-est models/mono/final.mdl kaldi/mono/final.txt.acc "$tmp/k.mdl" 2>/dev/null
  PATH=$bin:$kpath "$bin/gmm-est" models/mono/final.mdl kaldi/mono/final.txt.acc "$tmp/o.mdl" 2>/dev/null
  cmp -s "$tmp/o.mdl" "$tmp/k.mdl" || fail "gmm-est on a text acc: model differs from Kaldi's"
  PATH=$kpath gmm-sum-accs "$tmp/k.acc" kaldi/mono/final.acc kaldi/mono/no-such.acc >/dev/null 2>&1; rk=$?
  "$bin/gmm-sum-accs" "$tmp/o.acc" kaldi/mono/final.acc kaldi/mono/no-such.acc >/dev/null 2>&1; ro=$?
  [ $rk -eq $ro ] || fail "missing file: exit $ro, Kaldi's $rk"
  note="; sums (binary, text) and $n gmm-est option sets on 16 accs identical to this host's Kaldi"
else
  note="; not compared with this host's Kaldi: $host_kaldi_why"
fi
[ $fails -eq 0 ] || exit 1
echo "sum-accs: fixtures identical (sum, gmm-est on the pipe), glob in the shell's order, errors as Kaldi's$note"
