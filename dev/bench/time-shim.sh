#!/bin/bash
# Times every program a recipe runs, to find where a stage's wall time goes.
#
#   dev/bench/time-shim.sh make SHIMDIR LOG DIR...
#       writes into SHIMDIR one wrapper per executable of each DIR (later DIRs
#       win, so give Kaldi's bin first and ours last); put SHIMDIR first on
#       PATH. Each call appends "program start end user sys status" to LOG
#       (epoch seconds with microseconds; CPU seconds of the program and its
#       children) and runs the real program with the same arguments, stdin,
#       stdout, stderr and exit status. TIME_SHIM_VERBOSE_DIR=D (one of the
#       DIRs): D's programs get --verbose=1 first (our programs then log
#       their own time split, "Time: ...", into the job logs).
#   dev/bench/time-shim.sh report LOG STAGE_SPANS
#       per stage (STAGE_SPANS: "name start end" lines, as run.sh writes
#       EXP/stage_spans): per program calls, wall seconds summed, CPU seconds
#       summed, and the seconds of the stage during which at least one call
#       of it ran ("busy"); then the seconds of the stage during which no
#       timed program ran at all (the scripts' own serial work).
#
# The wrapper costs a bash start per call (a few ms): use it to find the
# bottleneck, not for the figures (egs/synth/s5/run.sh: RECIPE_TIME_PROGRAMS=1).
set -euo pipefail

make_shims() {
  local shim=$1 log=$2; shift 2
  mkdir -p "$shim"
  local d p name
  for d in "$@"; do
    for p in "$d"/*; do
      [ -f "$p" ] && [ -x "$p" ] || continue
      name=${p##*/}
      local extra=""
      [ "$(cd "$d" && pwd)" = "${TIME_SHIM_VERBOSE_DIR:+$(cd "$TIME_SHIM_VERBOSE_DIR" && pwd)}" ] && extra=" --verbose=1"
      case $name in *.sh|*.pl|*.py|kaldi-gpu-service) continue ;; esac
      # The real program is named by its absolute path: our programs find the
      # GPU service beside themselves (/proc/self/exe), not beside the shim.
      cat >"$shim/$name" <<EOF
#!/bin/bash
exec 5>&1 6>&2
t0=\$EPOCHREALTIME
TIMEFORMAT='%U %S'
r=\$( { time $(printf '%q' "$(cd "$d" && pwd)/$name")${extra:+ --verbose=1} "\$@" >&5 2>&6 5>&- 6>&-; } 2>&1; echo " \$?")
set -- \$r
echo "$name \$t0 \$EPOCHREALTIME \$1 \$2 \$3" >>$(printf '%q' "$log")
exit \$3
EOF
      chmod +x "$shim/$name"
    done
  done
}

report() {
  local log=$1 spans=$2
  # Per stage: assign each call to the stage its start falls in.
  awk -v spans="$spans" '
    BEGIN { while ((getline l < spans) > 0) { split(l, f, " "); ns++; sn[ns] = f[1]; s0[ns] = f[2]; s1[ns] = f[3] } }
    { for (i = 1; i <= ns; i++) if ($2 >= s0[i] && $2 <= s1[i]) { print sn[i], $1, $2, $3, $4 + $5; break } }
  ' "$log" | sort -k1,1 -k2,2 -k3,3n | awk -v spans="$spans" '
    BEGIN { while ((getline l < spans) > 0) { split(l, f, " "); order[++ns] = f[1]; wall[f[1]] = f[3] - f[2] } }
    function flush_prog() {
      if (prog == "") return
      busy += (e1 - e0); key = st SUBSEP prog
      calls[key] = n; sumw[key] = w; sumc[key] = c; busyp[key] = busy; progs[st] = progs[st] " " prog
      prog = ""
    }
    {
      if ($1 != st || $2 != prog) { flush_prog(); st = $1; prog = $2; n = 0; w = 0; c = 0; busy = 0; e0 = $3; e1 = $4 }
      else if ($3 > e1) { busy += e1 - e0; e0 = $3; e1 = $4 }
      else if ($4 > e1) e1 = $4
      n++; w += $4 - $3; c += $5
    }
    END {
      flush_prog()
      for (i = 1; i <= ns; i++) {
        s = order[i]; if (!(s in progs)) continue
        printf "\n### %s (%.2f s)\n\n| program | calls | wall s summed | CPU s summed | busy s |\n|---|---:|---:|---:|---:|\n", s, wall[s]
        m = split(progs[s], pl, " ")
        for (j = 1; j <= m; j++) { k = s SUBSEP pl[j]; printf "| %s | %d | %.2f | %.2f | %.2f |\n", pl[j], calls[k], sumw[k], sumc[k], busyp[k] }
      }
    }' | sort_tables
  # Stage seconds with no timed program running.
  awk -v spans="$spans" '
    BEGIN { while ((getline l < spans) > 0) { split(l, f, " "); ns++; sn[ns] = f[1]; s0[ns] = f[2]; s1[ns] = f[3] } }
    { for (i = 1; i <= ns; i++) if ($2 >= s0[i] && $2 <= s1[i]) { print i, $2, $3; break } }
  ' "$log" | sort -k1,1n -k2,2n | awk -v spans="$spans" '
    BEGIN { while ((getline l < spans) > 0) { split(l, f, " "); ns++; sn[ns] = f[1]; s0[ns] = f[2]; s1[ns] = f[3] } }
    { if ($1 != cur) { if (cur) covered[cur] = cov + (e1 - e0); cur = $1; cov = 0; e0 = $2; e1 = $3 }
      else if ($2 > e1) { cov += e1 - e0; e0 = $2; e1 = $3 } else if ($3 > e1) e1 = $3 }
    END {
      if (cur) covered[cur] = cov + (e1 - e0)
      printf "\n### Seconds of each stage with no timed program running\n\n| stage | wall s | no program s |\n|---|---:|---:|\n"
      for (i = 1; i <= ns; i++) printf "| %s | %.2f | %.2f |\n", sn[i], s1[i] - s0[i], (s1[i] - s0[i]) - covered[i]
    }'
}

# Rows of each table by busy seconds, largest first.
sort_tables() {
  awk '
    function out() { if (nr) { cmd = "sort -t\"|\" -k6,6gr"; for (i = 1; i <= nr; i++) print rows[i] | cmd; close(cmd) } nr = 0 }
    /^\| / && !/^\| program \|/ { rows[++nr] = $0; next }
    { out(); print }
    END { out() }'
}

case ${1:-} in
  make) [ $# -ge 4 ] || { echo "usage: $0 make SHIMDIR LOG DIR..." >&2; exit 1; }; shift; make_shims "$@" ;;
  report) [ $# -eq 3 ] || { echo "usage: $0 report LOG STAGE_SPANS" >&2; exit 1; }; report "$2" "$3" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 1 ;;
esac
