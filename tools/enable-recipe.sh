#!/bin/bash
# Makes a Kaldi recipe run our programs: appends to RECIPE_DIR/path.sh a
# block that puts our bin directory first on PATH. Appended, so it comes
# after Kaldi's own PATH lines: a stock path.sh sources
# $KALDI_ROOT/tools/config/common_path.sh, which puts Kaldi's src/*bin
# first, and every steps/*.sh sources path.sh again, so a PATH exported
# before the recipe runs loses to Kaldi's. Then check it:
#   tools/enable-recipe.sh RECIPE_DIR        add the block (again: no change)
#   tools/enable-recipe.sh --undo RECIPE_DIR remove it; path.sh as it was
#   tools/check-recipe.sh RECIPE_DIR         which programs the recipe runs
# Options: --bin DIR: our programs' directory (default: this checkout's
# gmmbin-gpu; e.g. PREFIX/bin after make install).
# KALDI_ONLY=true in the environment skips the block (stock Kaldi, to compare).
# Exit 0 done, 1 refused (no path.sh, a path.sh shared through a link), 2 usage.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
undo=0 bin=$top/gmmbin-gpu dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --undo) undo=1 ;;
    --bin) [ $# -ge 2 ] || usage; bin=$2; shift ;;
    --bin=*) bin=${1#--bin=} ;;
    -h|--help) usage ;;
    -*) echo "enable-recipe.sh: unknown option $1" >&2; usage ;;
    *) [ -z "$dir" ] || usage; dir=$1 ;;
  esac
  shift
done
[ -n "$dir" ] || usage
p=$dir/path.sh
[ -f "$p" ] || { echo "enable-recipe.sh: no $p (is $dir a Kaldi recipe directory, e.g. egs/wsj/s5?)" >&2; exit 1; }
if [ -L "$p" ]; then
  echo "enable-recipe.sh: $p is a link to $(readlink -f "$p"): editing it would change every recipe" \
    "that shares it. Make it a copy first (cp --remove-destination \"\$(readlink -f $p)\" $p)." >&2
  exit 1
fi
begin='# >>> kaldi-gpu-align:'
end='# <<< kaldi-gpu-align'

# The file without our block (the opening line records whether enabling
# added the newline the file lacked at its end, so that undo restores it
# byte for byte).
strip() {
  if ! has_block; then cat "$p"; return; fi
  awk -v b="$begin" -v e="$end" '
    index($0, b) == 1 {
      inb = 1
      if (index($0, "(newline added)")) buf = substr(buf, 1, length(buf) - 1)
      next }
    inb && $0 == e { inb = 0; next }
    inb { next }
    { buf = buf $0 "\n" }
    END { printf "%s", buf }' "$p"
}
has_block() { grep -q "^$begin" "$p"; }

if [ $undo = 1 ]; then
  if ! has_block; then echo "enable-recipe.sh: $p has no kaldi-gpu-align block: nothing to undo"; exit 0; fi
  tmp=$(mktemp "$p.XXXXXX") || exit 1
  strip >"$tmp" && cat "$tmp" >"$p"; rc=$?
  rm -f "$tmp"
  [ $rc = 0 ] && echo "enable-recipe.sh: removed the kaldi-gpu-align block from $p: the recipe runs Kaldi's programs"
  exit $rc
fi

[ -d "$bin" ] && bin=$(cd "$bin" && pwd) || { echo "enable-recipe.sh: no directory $bin" >&2; exit 1; }
for prog in gmm-align-compiled kaldi-gpu-service; do
  [ -x "$bin/$prog" ] || { echo "enable-recipe.sh: $bin/$prog is missing: build first (make)" >&2; exit 1; }
done
case "$bin" in *[\ \"\'\$\`\\]*) echo "enable-recipe.sh: $bin: a path with spaces or quotes is not supported" >&2; exit 1 ;; esac

tmp=$(mktemp "$p.XXXXXX") || exit 1
trap 'rm -f "$tmp"' EXIT
strip >"$tmp" || exit 1
note=""
[ ! -s "$tmp" ] || [ "$(tail -c1 "$tmp" | od -An -c | tr -d ' ')" = '\n' ] || { note=" (newline added)"; echo >>"$tmp"; }
cat >>"$tmp" <<EOF
$begin our programs before Kaldi's, after Kaldi's PATH lines (tools/enable-recipe.sh; --undo removes this)$note
[ "\${KALDI_ONLY:-false}" = true ] || export PATH=$bin:\$PATH
$end
EOF
if cmp -s "$tmp" "$p"; then
  echo "enable-recipe.sh: $p already runs $bin first: unchanged"
else
  had=0; has_block && had=1
  cat "$tmp" >"$p" || exit 1
  if [ $had = 1 ]; then echo "enable-recipe.sh: updated the kaldi-gpu-align block of $p ($bin)"
  else echo "enable-recipe.sh: $p now puts $bin first on PATH, after Kaldi's own lines"; fi
fi
echo "Check it: $top/tools/check-recipe.sh $dir"
