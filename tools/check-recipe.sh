#!/bin/bash
# Which programs a Kaldi recipe will run: ours or Kaldi's. Run it in the
# recipe directory (or name it): it sources ./path.sh there as every
# steps/*.sh does, then prints, for each program we replace, the file the
# recipe runs and whether it is ours (with our version) or Kaldi's; then
# what a job started here would use (kaldi-gpu-service --describe): the
# GPUs and the code of this build they run, the GPU service's directory and
# socket, the rounding profile.
#   tools/check-recipe.sh [RECIPE_DIR]      (default: the current directory)
# It describes this machine: under queue.pl or slurm.pl the jobs run on the
# compute nodes, so run it there too, through the recipe's own command:
#   $train_cmd exp/check.log /path/to/tools/check-recipe.sh $PWD
# Exit 0: every replaced program is ours; 1: some or all are Kaldi's (or
# path.sh failed); 2: usage.
set -u
case "${1:-}" in -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
[ $# -le 1 ] || { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
top=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-.}
cd "$dir" 2>/dev/null || { echo "check-recipe.sh: no directory $dir" >&2; exit 2; }
[ -f path.sh ] || { echo "check-recipe.sh: no path.sh in $PWD (run it in a Kaldi recipe directory)" >&2; exit 2; }
# The programs steps/*.sh call that we replace; then ours alone.
replaced="gmm-align-compiled align-equal-compiled gmm-acc-stats-ali compile-train-graphs gmm-align align-equal gmm-est gmm-sum-accs gmm-acc-mllt ali-to-post ali-to-phones weight-silence-post gmm-acc-stats-twofeats acc-tree-stats sum-tree-stats build-tree cluster-phones gmm-est-fmllr"
own="gmm-align-acc-compiled kaldi-gpu-service"

# Everything below runs after path.sh, in a subshell: its variables
# (CUDA_VISIBLE_DEVICES, KALDI_GPU_BLAS_PROFILE, ...) count too.
# path.sh may exit (a stock one does when KALDI_ROOT is wrong): try it first.
err=$( (. ./path.sh >/dev/null) 2>&1) || {
  echo "Recipe: $PWD: sourcing path.sh failed (steps/*.sh would fail too):"
  echo "$err" | sed 's/^/  /'
  exit 1
}
(
  # shellcheck disable=SC1091
  . ./path.sh >/dev/null 2>&1
  echo "Recipe: $PWD (path.sh sourced as steps/*.sh do)"
  [ "${KALDI_ONLY:-false}" = true ] && echo "KALDI_ONLY=true is set: an enabled path.sh leaves our programs out"
  # "ours VERSION" if the file is one of our programs (it holds our
  # identification string: base/sys/version.h), else empty.
  whose() {
    local v
    v=$(LC_ALL=C grep -a -o -m1 'kaldi-gpu-align [0-9][0-9A-Za-z.~+-]*' "$1" 2>/dev/null | head -1)
    [ -n "$v" ] && echo "ours ($v)"
  }
  ours=0 kaldi=0 ourbin=""
  printf '%-24s %-30s %s\n' program "runs" file
  for prog in $replaced $own; do
    f=$(type -P "$prog")
    if [ -z "$f" ]; then
      printf '%-24s %-30s %s\n' "$prog" "NOT FOUND" "-"
      case " $replaced " in *" $prog "*) kaldi=$((kaldi + 1)) ;; esac
      continue
    fi
    w=$(whose "$f")
    if [ -n "$w" ]; then
      [ -n "$ourbin" ] || ourbin=$(dirname "$f")
      if [ "$prog" != kaldi-gpu-service ] && ! "$f" --help >/dev/null 2>&1; then
        w="$w, BUT IT DOES NOT START: $("$f" --help 2>&1 | head -1)"
        case " $replaced " in *" $prog "*) kaldi=$((kaldi + 1)) ;; esac
      else
        case " $replaced " in *" $prog "*) ours=$((ours + 1)) ;; esac
      fi
    else
      w="KALDI'S"
      case " $replaced " in *" $prog "*) kaldi=$((kaldi + 1)) ;; esac
    fi
    # Kaldi's program of the same name further on PATH, hidden by ours
    hidden=$(type -a -P "$prog" | sed 1d | head -1)
    printf '%-24s %-30s %s%s\n' "$prog" "$w" "$f" "${hidden:+ (hides $hidden)}"
  done
  echo
  svc=${KALDI_GPU_SERVICE_BIN:-${ourbin:+$ourbin/kaldi-gpu-service}}
  if [ -n "$svc" ] && [ -x "$svc" ]; then
    echo "A job started here would use (kaldi-gpu-service --describe):"
    "$svc" --describe --print-args=false 2>&1 | sed 's/^/  /'
  else
    echo "GPUs and service: none (our programs are not on the recipe's PATH)"
  fi
  echo
  n=$(echo $replaced | wc -w)
  if [ $ours -eq "$n" ]; then
    echo "ENABLED: the recipe runs our programs ($ours of $n replaced programs)."
    exit 0
  elif [ $ours -eq 0 ]; then
    echo "NOT ENABLED: the recipe runs Kaldi's own programs. Run: $top/tools/enable-recipe.sh $PWD"
  else
    echo "PARTLY ENABLED: $ours of $n programs are ours, $kaldi are not (see above)."
  fi
  exit 1
)
