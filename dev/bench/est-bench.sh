#!/bin/bash
# The serial step between a recipe's parallel jobs: Kaldi's
#   gmm-est --mix-up=N --power=0.25 --write-occs=X.occs X.mdl "gmm-sum-accs - X.*.acc |" X+1.mdl
# (Kaldi's gmm-sum-accs in the pipe) against ours (the pipe summed in
# process, the files read by several threads), and gmm-sum-accs alone, on
# BENCH_EST_JOBS statistics files (default 16, as --nj 16) per fixture model:
# tri1 (15,053 Gaussians, ~5 MB per file) and mono. The files come from the
# fixture features cut into that many parts (our gmm-acc-stats-ali
# --use-gpu=no). Each command runs BENCH_EST_REPEAT times (default 5); the
# table gives the median wall time and whether the outputs are identical.
# Env: KALDI_ROOT or KALDI_BUNDLE (a Kaldi tree with src/gmmbin/, or a bundle
# with bin/ and lib/; without it only our figures), BIN (our programs),
# BENCH_EST_MODELS (default "tri1 mono"). Prints a markdown table.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "${BIN:-$top/gmmbin-gpu}" && pwd)
jobs=${BENCH_EST_JOBS:-16}
repeat=${BENCH_EST_REPEAT:-5}
models=${BENCH_EST_MODELS:-tri1 mono}
fix=$top/tests/data
out=$top/bench-data/est
mkdir -p "$out"
for p in gmm-est gmm-sum-accs gmm-acc-stats-ali; do
  [ -x "$bin/$p" ] || { echo "est-bench: $bin/$p not built"; exit 1; }
done

kbin=""
root=${KALDI_ROOT:-${KALDI_BUNDLE:-}}
if [ -n "$root" ]; then
  for d in "$root/src/gmmbin" "$root/bin"; do
    [ -x "$d/gmm-est" ] && [ -x "$d/gmm-sum-accs" ] && { kbin=$d; break; }
  done
  [ -d "$root/lib" ] && export LD_LIBRARY_PATH="$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  [ -n "$kbin" ] || echo "est-bench: no gmm-est and gmm-sum-accs under $root"
fi
# Both sides' gmm-sum-accs by name, as the scripts' pipe calls it: Kaldi's
# first on PATH (ours does not run it: the pipe is summed in process).
kpath=${kbin:+$kbin:}$PATH

# median wall seconds of REPEAT runs of the command; its stderr into $log
median() {
  local i t0 t1 ts=()
  for ((i = 0; i < repeat; i++)); do
    t0=$(date +%s.%N)
    "$@" 2>"$log" >/dev/null || { echo "est-bench: failed: $* (see $log)" >&2; fails=1; }
    t1=$(date +%s.%N)
    ts+=("$(awk "BEGIN {print $t1 - $t0}")")
  done
  printf '%s\n' "${ts[@]}" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'
}

echo "est-bench: $jobs statistics files per model, $(nproc) cores, median of $repeat runs"
echo
echo "| model | Gaussians | program | Kaldi s | ours s | speed-up | identical |"
echo "|---|---|---|---|---|---|---|"
fails=0
for m in $models; do
  d=$out/$m.$jobs
  mkdir -p "$d"
  if [ ! -s "$d/1.$jobs.acc" ]; then
    for j in $(seq 1 "$jobs"); do
      awk -v j="$j" -v n="$jobs" 'NR % n == j % n' "$fix/feats/delta.scp" |
        sed "s|feats/delta.ark|$fix/feats/delta.ark|" >"$d/f.$j.scp"
      "$bin/gmm-acc-stats-ali" --use-gpu=no "$fix/models/$m/final.mdl" "scp:$d/f.$j.scp" \
        "ark:$fix/kaldi/$m/ali.ark" "$d/1.$j.acc" 2>"$d/acc.$j.log" ||
        { echo "est-bench: gmm-acc-stats-ali failed ($d/acc.$j.log)"; exit 1; }
    done
  fi
  # the fixture models' Gaussians (gmm-info); mixing up by 1/16, as an
  # iteration of train_deltas.sh does towards its target
  case $m in tri1) ng=15053 ;; mono) ng=975 ;; *) ng=$(PATH=$kpath gmm-info "$fix/models/$m/final.mdl" 2>/dev/null |
       sed -n 's/number of gaussians //p') ;; esac
  mix=$(( ${ng:-1000} + ${ng:-1000} / 16 ))
  est=(--mix-up=$mix --power=0.25)
  pipe="gmm-sum-accs - $d/1.*.acc |"
  log=$out/$m.ours.est.log
  o=$(PATH=$kpath median "$bin/gmm-est" "${est[@]}" --write-occs="$d/o.occs" "$fix/models/$m/final.mdl" "$pipe" "$d/o.mdl")
  log=$out/$m.ours.sum.log
  os=$(median "$bin/gmm-sum-accs" "$d/o.acc" "$d"/1.*.acc)
  if [ -n "$kbin" ]; then
    log=$out/$m.kaldi.est.log
    k=$(PATH=$kpath median "$kbin/gmm-est" "${est[@]}" --write-occs="$d/k.occs" "$fix/models/$m/final.mdl" "$pipe" "$d/k.mdl")
    log=$out/$m.kaldi.sum.log
    ks=$(median "$kbin/gmm-sum-accs" "$d/k.acc" "$d"/1.*.acc)
    same=no; cmp -s "$d/o.mdl" "$d/k.mdl" && cmp -s "$d/o.occs" "$d/k.occs" && same=yes
    [ $same = yes ] || fails=1
    printf '| %s | %s | gmm-est %s "gmm-sum-accs - %d files \\|" | %.3f | %.3f | %.2fx | %s |\n' "$m" "$ng" \
      "${est[*]}" "$jobs" "$k" "$o" "$(awk "BEGIN {print $k / $o}")" "$same"
    same=no; cmp -s "$d/o.acc" "$d/k.acc" && same=yes
    [ $same = yes ] || fails=1
    printf '| %s | %s | gmm-sum-accs (%d files) | %.3f | %.3f | %.2fx | %s |\n' "$m" "$ng" "$jobs" \
      "$ks" "$os" "$(awk "BEGIN {print $ks / $os}")" "$same"
  else
    printf '| %s | %s | gmm-est %s "gmm-sum-accs - %d files \\|" | - | %.3f | - | - |\n' "$m" "$ng" \
      "${est[*]}" "$jobs" "$o"
    printf '| %s | %s | gmm-sum-accs (%d files) | - | %.3f | - | - |\n' "$m" "$ng" "$jobs" "$os"
  fi
done
exit $fails
