#!/bin/bash
# Our gmm-est (gmmbin-gpu/gmm-est: train/est.c) against Kaldi's gmm-est, on
# statistics files (the gmm-sum-accs pipe of the steps scripts: sum-accs.sh):
#  - the fixtures (reference hosts' Kaldi, rounding profile skx): kaldi/mono/est.mdl
#    byte for byte, the closing lines of kaldi/{mono,tri2}/est.log;
#  - usage and fatal errors: exit 1 with the usage, 255 with an ERROR line;
#  - with the Kaldi bundle (else SKIP of that part): the fixtures' models and
#    statistics under 10 option sets (mixing up with --power, --min-count,
#    --perturb-factor, --write-occs, --min-gaussian-occupancy, --update-flags,
#    --transition-floor), models, occupancies and every log message identical
#    to the host's gmm-est, in the profile that reproduces this host's Kaldi.
# Env: TOP, BIN. Exit 0 pass, 1 fail, 77 skip.
set -u
: "${TOP:?}" "${BIN:?}"
prog=$BIN/gmm-est
[ -x "$prog" ] || { echo "SKIP: $prog not built"; exit 77; }
tmp=$(mktemp -d /tmp/est-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# Messages of a log: "LEVEL message", without the program's own first line
# and the echoed command line.
msgs() {
  awk '/kio_log_ours/ || /\) Rounding as / {next}
       /^(LOG|WARNING|ERROR) \(/ { i = index($0, ") "); print $1 " " substr($0, i + 2) }' "$1" |
    sed 's/Written model to .*/Written model/'
}
cd "$TOP/tests/data" || exit 1

export KALDI_GPU_BLAS_PROFILE=skx
"$prog" models/mono/final.mdl kaldi/mono/final.acc "$tmp/mono.mdl" 2>"$tmp/mono.log" ||
  fail "mono: exit $?: $(tail -n 2 "$tmp/mono.log")"
cmp -s "$tmp/mono.mdl" kaldi/mono/est.mdl || fail "mono: model differs from kaldi/mono/est.mdl"
for m in mono tri2; do
  "$prog" models/$m/final.mdl kaldi/$m/final.acc "$tmp/$m.mdl" 2>"$tmp/$m.log"
  # est.log keeps Kaldi's last 20 lines
  diff <(msgs kaldi/$m/est.log) <(msgs "$tmp/$m.log" | tail -n "$(msgs kaldi/$m/est.log | wc -l)") \
    >"$tmp/d" || { fail "$m: log messages differ from kaldi/$m/est.log:"; head -n 6 "$tmp/d"; }
done

"$prog" models/mono/final.mdl >/dev/null 2>"$tmp/u.log"; rc=$?
[ $rc -eq 1 ] && grep -q "^Usage:  gmm-est" "$tmp/u.log" || fail "wrong arguments: exit $rc, not 1 with the usage"
"$prog" models/mono/final.mdl kaldi/mono/no-such.acc "$tmp/x.mdl" 2>"$tmp/e.log"; rc=$?
[ $rc -eq 255 ] && grep -q "^ERROR .*no-such.acc" "$tmp/e.log" || fail "missing stats: exit $rc: $(tail -n 1 "$tmp/e.log")"
[ ! -e "$tmp/x.mdl" ] || fail "missing stats: a model was written"
"$prog" models/tri2/final.mdl kaldi/mono/final.acc "$tmp/x.mdl" 2>"$tmp/e.log"; rc=$?
[ $rc -eq 255 ] && grep -q "^ERROR " "$tmp/e.log" || fail "stats of another model: exit $rc"
"$prog" --mix-down=100 models/mono/final.mdl kaldi/mono/final.acc "$tmp/x.mdl" 2>"$tmp/e.log"; rc=$?
[ $rc -eq 255 ] && grep -q "mix-down" "$tmp/e.log" || fail "--mix-down: exit $rc, not an ERROR"
"$prog" --update-flags=mvq models/mono/final.mdl kaldi/mono/final.acc "$tmp/x.mdl" 2>"$tmp/e.log"; rc=$?
[ $rc -eq 255 ] && grep -q "Invalid element q" "$tmp/e.log" || fail "--update-flags=mvq: exit $rc"

# Against this host's Kaldi (KALDI_BUNDLE, or the shared bundle's tarball).
. "$TOP/tests/cli/lib/recipe-setup.sh"
recipe_host_kaldi "$tmp"
if [ -n "$host_kaldi" ]; then
  note=" (rounding: $("$BIN/kaldi-gpu-service" --print-rounding 2>/dev/null | cut -f1))"
  n=0
  for m in mono tri2 mono4 mono8; do
    while read -r opts; do
      o=${opts//OCC/$tmp/o.occs}; k=${opts//OCC/$tmp/k.occs}
      # shellcheck disable=SC2086
      "$prog" $o models/$m/final.mdl kaldi/$m/final.acc "$tmp/o.mdl" 2>"$tmp/o.log"
      # shellcheck disable=SC2086
      "$kb/bin/gmm-est" $k models/$m/final.mdl kaldi/$m/final.acc "$tmp/k.mdl" 2>"$tmp/k.log"
      cmp -s "$tmp/o.mdl" "$tmp/k.mdl" || fail "$m [$opts]: model differs from Kaldi's"
      diff <(msgs "$tmp/k.log") <(msgs "$tmp/o.log") >"$tmp/d" ||
        { fail "$m [$opts]: log messages differ:"; head -n 6 "$tmp/d"; }
      case $opts in *OCC*) cmp -s "$tmp/o.occs" "$tmp/k.occs" || fail "$m [$opts]: occs differ";; esac
      n=$((n + 1))
    done <<'OPTS'
--mix-up=300 --power=0.25
--mix-up=3000 --power=0.2 --write-occs=OCC
--min-gaussian-occupancy=3 --mix-up=1500 --power=0.25
--mix-up=25000
--mix-up=2500 --min-count=5 --perturb-factor=0.05
--transition-floor=0.05 --update-flags=mv
--update-flags=vw --transition-min-count=50
--update-flags=m --min-variance=0.5
--remove-low-count-gaussians=false --min-gaussian-weight=0.01
--write-occs=OCC --update-flags=t
OPTS
  done
  note="; $n option sets identical to this host's gmm-est$note"
else
  note="; not compared with this host's gmm-est: $host_kaldi_why"
fi
[ $fails -eq 0 ] || exit 1
echo "est: fixtures identical (model, messages), errors as Kaldi's$note"
