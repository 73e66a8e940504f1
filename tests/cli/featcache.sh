#!/bin/bash
# The feature cache (base/feat/feat-cache.c) on a recipe-like directory made
# from the fixtures (tools/gfeat-testdata: 40 utterances, compressed 13-dim
# input, per-speaker CMVN and fMLLR transforms):
#  - the LDA and LDA+fMLLR chains read by gmm-acc-stats-ali (sequential
#    reader), gmm-align-compiled (random access, ark,s,cs) and
#    acc-tree-stats: a miss (entry written) and a hit (the same entry read)
#    give the outputs and the stderr lines (sorted: the chain's lines come
#    from its own thread) of KALDI_GPU_FEATS_CACHE=0, byte for byte;
#  - the deltas chain (no transform-feats: not worth keeping) read by the
#    same programs leaves the cache folder as it was (no entry, no file,
#    the folder's listing and mtime unchanged; not made when absent), the
#    outputs and stderr those of KALDI_GPU_FEATS_CACHE=0;
#  - an entry written with 3 feature threads serves 1 thread (the output
#    does not depend on them);
#  - changed inputs are misses with the right output: the features archive
#    rewritten, the CMVN scp, a transform, utt2spk changed, a file touched;
#  - a corrupted or truncated entry is a miss (removed), the output right;
#  - a hit checked on 4 threads gives the miss's archive; a corruption in
#    its last entry (the last thread's part) is a miss, the output right;
#  - no entry from a chain that warns (a speaker without CMVN stats), nor
#    from a reader that leaves before the chain's end (gmm-align-compiled
#    with 3 graphs for 160 utterances), nor from a chain that fails;
#  - the budget: KALDI_GPU_FEATS_CACHE_MAX too small stores nothing; room
#    for two entries removes the least recently used;
#  - two writers of the same key at once: one valid entry;
#  - KALDI_GPU_FEATS_CACHE=0: nothing written.
# Env: BIN, TOP, TOOLS. Exit 0 pass, 1 fail, 77 skip.
set -u
: "${BIN:?}" "${TOP:?}" "${TOOLS:?}"
BIN=$(cd "$BIN" && pwd) || exit 1
TOOLS=$(cd "$TOOLS" && pwd) || exit 1
for x in gmm-align-compiled gmm-acc-stats-ali acc-tree-stats compile-train-graphs; do
  if [ ! -x "$BIN/$x" ]; then echo "SKIP: $BIN/$x not built"; exit 77; fi
done
for x in gfeat-testdata feat-copy; do
  if [ ! -x "$TOOLS/$x" ]; then echo "SKIP: $TOOLS/$x not built"; exit 77; fi
done
tmp=$(mktemp -d /tmp/featcache-cli.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
cd "$TOP/tests/data" || exit 1
export KALDI_GPU_SERVICE=no
unset KALDI_GPU_FEATS_PIPE KALDI_GPU_FEATS_THREADS KALDI_GPU_FEATS_CACHE_MAX
C=$tmp/cache
export KALDI_GPU_FEATS_CACHE=$C

fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
d=$tmp/d
mkdir -p "$d" "$tmp/drop"
"$TOOLS/gfeat-testdata" --fmllr=40 ark:feats/delta.ark "$d" 2>/dev/null &&
  "$TOOLS/gfeat-testdata" --fmllr=40 --drop-last-speaker ark:feats/delta.ark "$tmp/drop" 2>/dev/null ||
  { echo "FAIL: gfeat-testdata"; exit 1; }
cp models/tri2/final.mat "$d/final.mat"
opts="--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1 --beam=10 --retry-beam=40"
sil=1:2:3:4:5:6:7:8:9:10
entries() { find "$C" -name '*.fc' 2>/dev/null | wc -l; }
# The folder's mtime (ns) and listing.
folder_state() { stat -c 'folder %.9Y' "$C" 2>&1; ls -lA --time-style=+%s.%N "$C" 2>&1; }
# The only entry's inode and mtime (ns).
entry_id() { stat -c '%i %.9Y' "$C"/*.fc 2>/dev/null; }
sorted() { sed -E -e "s|$tmp|T|g" -e 's/\.(ref|miss|hit)\./.X./g' "$1" | sort; }

# chain DIR KIND: the features rspecifier (ark,s,cs) of a chain over DIR.
chain() {
  local c="apply-cmvn --utt2spk=ark:$1/utt2spk scp:$1/cmvn.scp scp:$1/feats.scp ark:- |"
  local lda=" splice-feats --left-context=3 --right-context=3 ark:- ark:- | transform-feats $d/final.mat ark:- ark:- |"
  case $2 in
    delta) echo "ark,s,cs:$c add-deltas ark:- ark:- |" ;;
    lda) echo "ark,s,cs:$c$lda" ;;
    ldasel) echo "ark,s,cs:$c$lda select-feats 0-9 ark:- ark:- |" ;;
    sat) echo "ark,s,cs:$c$lda transform-feats --utt2spk=ark:$1/utt2spk ark:$1/trans.ark ark:- ark:- |" ;;
  esac
}
model() { case $1 in delta) echo tri1 ;; *) echo tri2 ;; esac; }

# run TAG PROG FEATS MODEL: one program on the chain, outputs $tmp/TAG.*
run() {
  local tag=$1 prog=$2 f=$3 m=models/$4
  case $prog in
    align)
      # shellcheck disable=SC2086
      "$BIN/gmm-align-compiled" --use-gpu=no $opts $m/final.mdl "ark:gunzip -c graphs/$4.fsts.gz|" "$f" \
        "ark:$tmp/$tag.out" "ark,t:$tmp/$tag.scores" 2>"$tmp/$tag.log" ;;
    acc)
      "$BIN/gmm-acc-stats-ali" --use-gpu=no --binary=false $m/final.mdl "$f" "ark:$tmp/ali.$4" \
        "$tmp/$tag.out" 2>"$tmp/$tag.log" ;;
    tree)
      "$BIN/acc-tree-stats" --ci-phones=$sil $m/final.mdl "$f" "ark:$tmp/ali.$4" "$tmp/$tag.out" \
        2>"$tmp/$tag.log" ;;
  esac
  echo $? >"$tmp/$tag.rc"
}
# same REF TAG WHAT: TAG's outputs, exit status and sorted stderr = REF's.
same() {
  cmp -s "$tmp/$1.out" "$tmp/$2.out" || fail "$3: output differs from the uncached run's"
  [ ! -f "$tmp/$1.scores" ] || cmp -s "$tmp/$1.scores" "$tmp/$2.scores" || fail "$3: scores differ"
  cmp -s "$tmp/$1.rc" "$tmp/$2.rc" || fail "$3: exit $(cat "$tmp/$2.rc"), uncached $(cat "$tmp/$1.rc")"
  diff <(sorted "$tmp/$1.log") <(sorted "$tmp/$2.log") >"$tmp/$2.diff" ||
    { fail "$3: stderr differs (< uncached, > cached):"; head -10 "$tmp/$2.diff" | sed 's/^/    /'; }
}

# The alignments the accumulators read.
for k in delta lda; do
  KALDI_GPU_FEATS_CACHE=0 run ali.$k align "$(chain "$d" $k)" "$(model $k)"
  cp "$tmp/ali.$k.out" "$tmp/ali.$(model $k)"
done
[ -s "$tmp/ali.tri1" ] && [ -s "$tmp/ali.tri2" ] || { echo "FAIL: no alignments"; exit 1; }

n=0
for k in delta lda sat; do
  for p in acc align tree; do
    [ $k = sat ] && [ $p = tree ] && continue
    n=$((n + 1))
    f=$(chain "$d" $k)
    m=$(model $k)
    rm -rf "$C"
    KALDI_GPU_FEATS_CACHE=0 run $k.$p.ref $p "$f" $m
    [ "$(cat "$tmp/$k.$p.ref.rc")" = 0 ] || fail "$k $p: uncached run exit $(cat "$tmp/$k.$p.ref.rc")"
    [ -d "$C" ] && fail "$k $p: KALDI_GPU_FEATS_CACHE=0 made the folder"
    if [ $k = delta ]; then
      # Not worth keeping: the folder as it was, with and without a folder.
      mkdir -m 700 "$C"
      st0=$(folder_state)
      sleep 0.01  # so that a change in the folder moves its mtime
      KALDI_GPU_FEATS_THREADS=3 run $k.$p.miss $p "$f" $m
      [ "$(folder_state)" = "$st0" ] ||
        fail "$k $p: the cache folder changed: $(folder_state | tail -n +2 | tr '\n' ' ')"
      rm -rf "$C"
      KALDI_GPU_FEATS_THREADS=1 run $k.$p.hit $p "$f" $m
      [ -e "$C" ] && fail "$k $p: the cache folder made"
      same $k.$p.ref $k.$p.miss "$k $p (folder present)"
      same $k.$p.ref $k.$p.hit "$k $p (no folder)"
      continue
    fi
    KALDI_GPU_FEATS_THREADS=3 run $k.$p.miss $p "$f" $m
    [ "$(entries)" = 1 ] || { fail "$k $p: $(entries) entries after the miss"; continue; }
    id=$(entry_id)
    KALDI_GPU_FEATS_THREADS=1 run $k.$p.hit $p "$f" $m
    id2=$(entry_id)
    [ "${id%% *}" = "${id2%% *}" ] && [ "$id" != "$id2" ] || fail "$k $p: not a hit ($id / $id2)"
    same $k.$p.ref $k.$p.miss "$k $p miss"
    same $k.$p.ref $k.$p.hit "$k $p hit"
  done
done

# The VLOG line of a hit, and of the disabled cache.
f=$(chain "$d" lda)
"$TOOLS/feat-copy" "$f" "ark:$tmp/v1.ark" 2>/dev/null
"$TOOLS/feat-copy" --verbose=1 "$f" "ark:$tmp/v.ark" 2>"$tmp/v.log"
grep -q "Feature cache: hit" "$tmp/v.log" || fail "no 'Feature cache: hit' VLOG line"
KALDI_GPU_FEATS_CACHE=0 "$TOOLS/feat-copy" --verbose=1 "$f" "ark:$tmp/v0.ark" 2>"$tmp/v0.log"
grep -q "Feature cache: disabled" "$tmp/v0.log" || fail "no 'Feature cache: disabled' VLOG line"
cmp -s "$tmp/v.ark" "$tmp/v0.ark" || fail "feat-copy: the hit's archive differs"
"$TOOLS/feat-copy" --verbose=1 "$(chain "$d" delta)" "ark:$tmp/vd.ark" 2>"$tmp/vd.log"
grep -q "Feature cache: not used: no transform-feats stage" "$tmp/vd.log" ||
  fail "deltas chain: no 'Feature cache: not used' VLOG line"

# copy FEATS TAG: feat-copy through the cache (verbose: hit or miss) and
# without it; the archives must agree. Prints hit / miss.
copy() {
  "$TOOLS/feat-copy" --verbose=1 "$1" "ark:$tmp/$2.ark" 2>"$tmp/$2.log"
  KALDI_GPU_FEATS_CACHE=0 "$TOOLS/feat-copy" "$1" "ark:$tmp/$2.ref.ark" 2>/dev/null
  cmp -s "$tmp/$2.ark" "$tmp/$2.ref.ark" || fail "$2: archive differs from the uncached one"
  if grep -q "Feature cache: hit" "$tmp/$2.log"; then echo hit
  elif grep -q "Feature cache: miss" "$tmp/$2.log"; then echo miss
  else echo "other: $(grep -o 'Feature cache: .*' "$tmp/$2.log")"; fi
}
# Changed inputs (each on a fresh copy of the directory, cached first).
change() {  # NAME KIND COMMAND (run in the copy's folder $e)
  local name=$1 kind=$2
  e=$tmp/chg.$name
  rm -rf "$e" "$C"
  cp -r "$d" "$e"
  sed -i "s|$d/|$e/|" "$e/feats.scp" "$e/cmvn.scp"
  local f
  f=$(chain "$e" "$kind")
  [ "$(copy "$f" "$name.0")" = miss ] || fail "$name: first run not a miss"
  [ "$(copy "$f" "$name.1")" = hit ] || fail "$name: second run not a hit"
  eval "$3"
  [ "$(copy "$f" "$name.2")" = miss ] || fail "$name: a hit after the change"
  cmp -s "$tmp/$name.1.ark" "$tmp/$name.2.ark" && [ "$4" = differs ] &&
    fail "$name: the change made no difference (test broken)"
}
# one byte of the last utterance's compressed data
change feats lda 'printf "\x55" | dd of="$e/raw.ark" bs=1 seek=$(( $(stat -c %s "$e/raw.ark") - 100 )) conv=notrunc 2>/dev/null' differs
# two speakers' CMVN stats swapped
change cmvn lda 'awk "{k[NR]=\$1; v[NR]=\$2} END {t=v[1]; v[1]=v[2]; v[2]=t; for (i=1;i<=NR;i++) print k[i], v[i]}" "$e/cmvn.scp" >"$e/c2" && mv "$e/c2" "$e/cmvn.scp"' differs
# a speaker's fMLLR transform: the lowest byte of a float of the last matrix
change trans sat 'printf "\x01" | dd of="$e/trans.ark" bs=1 seek=$(( $(stat -c %s "$e/trans.ark") - 20 )) conv=notrunc 2>/dev/null' differs
# an utterance moved to another speaker
change utt2spk lda 'last=$(tail -n 1 "$e/utt2spk" | cut -d" " -f2); awk -v s="$last" "NR==1 {\$2=s} {print}" "$e/utt2spk" >"$e/u2" && mv "$e/u2" "$e/utt2spk"' differs
# the same bytes, touched
change touch lda 'touch "$e/raw.ark"' same

# A corrupted and a truncated entry: misses (removed, written again), the
# output right.
rm -rf "$C"
f=$(chain "$d" lda)
[ "$(copy "$f" c0)" = miss ] || fail "corrupt: first run not a miss"
# (without an entry the size arithmetic below would abort the script)
if e=$(ls "$C"/*.fc 2>/dev/null) && [ -f "$e" ]; then
  printf '\x7f' | dd of="$e" bs=1 seek=$(( $(stat -c %s "$e") / 2 )) conv=notrunc 2>/dev/null
  [ "$(copy "$f" c1)" = miss ] || fail "corrupted entry: not a miss"
  grep -q "entry was invalid" "$tmp/c1.log" || fail "corrupted entry: not reported invalid"
  [ "$(copy "$f" c2)" = hit ] || fail "corrupt: the entry was not written again"
  truncate -s $(( $(stat -c %s "$e") - 4 )) "$e"
  [ "$(copy "$f" c3)" = miss ] || fail "truncated entry: not a miss"
  grep -q "entry was invalid" "$tmp/c3.log" || fail "truncated entry: not reported invalid"
else
  fail "corrupt: no entry to corrupt"
fi

# No entry: a chain that warns (a speaker without CMVN stats), a reader
# that leaves early, a chain that fails (a transform file missing).
rm -rf "$C"
f=$(chain "$tmp/drop" lda)
copy "$f" warn >/dev/null
grep -q "No normalization statistics" "$tmp/warn.log" || fail "warn: no apply-cmvn warning (test broken)"
[ "$(entries)" = 0 ] || fail "warn: an entry for a chain that warned"
# 160 utterances (more than the chain's queue holds), 3 of them aligned
mkdir -p "$tmp/big"
"$TOOLS/gfeat-testdata" --copies=4 ark:feats/delta.ark "$tmp/big" 2>/dev/null || fail "gfeat-testdata --copies"
head -n 3 kaldi/text.int | sed 's/^/r000-/' >"$tmp/text3"
"$BIN/compile-train-graphs" --read-disambig-syms=models/disambig.int models/tri2/tree models/tri2/final.mdl \
  models/L.fst "ark:$tmp/text3" "ark:$tmp/g3" 2>/dev/null || fail "early: compile-train-graphs"
f=$(chain "$tmp/big" lda)
"$BIN/gmm-align-compiled" --use-gpu=no $opts models/tri2/final.mdl "ark:$tmp/g3" "${f/ark,s,cs:/ark:}" \
  "ark:$tmp/early.ali" 2>"$tmp/early.log" || fail "early: gmm-align-compiled exit $?"
grep -q "Done 3, errors on 0" "$tmp/early.log" || fail "early: not 3 aligned"
[ "$(entries)" = 0 ] || fail "early: an entry from a reader that left early"
# A hit checked on several threads (160 utterances, ~9 MB: a quarter each):
# the same archive as the miss and the uncached chain; a byte changed in
# the last entry's data (the last thread's part) is found before anything
# is handed out: a miss (removed, written again), the output right.
rm -rf "$C"
f=$(chain "$tmp/big" lda)
[ "$(KALDI_GPU_FEATS_THREADS=4 copy "$f" mt0)" = miss ] || fail "threads: first run not a miss"
[ "$(KALDI_GPU_FEATS_THREADS=4 copy "$f" mt1)" = hit ] || fail "threads: second run not a hit"
grep -q "Feature cache: hit .*checked on 4 threads" "$tmp/mt1.log" ||
  fail "threads: the hit not checked on 4 threads: $(grep -o 'Feature cache: .*' "$tmp/mt1.log")"
cmp -s "$tmp/mt0.ark" "$tmp/mt1.ark" || fail "threads: the hit's archive differs from the miss's"
if e=$(ls "$C"/*.fc 2>/dev/null) && [ -f "$e" ]; then
  printf '\x01' | dd of="$e" bs=1 seek=$(( $(stat -c %s "$e") - 2000 )) conv=notrunc 2>/dev/null
  [ "$(KALDI_GPU_FEATS_THREADS=4 copy "$f" mt2)" = miss ] || fail "threads: a late corruption not a miss"
  grep -q "entry was invalid (checksum)" "$tmp/mt2.log" || fail "threads: late corruption not reported"
  cmp -s "$tmp/mt0.ark" "$tmp/mt2.ark" || fail "threads: the archive after a late corruption differs"
  [ "$(KALDI_GPU_FEATS_THREADS=4 copy "$f" mt3)" = hit ] || fail "threads: the entry was not written again"
  cmp -s "$tmp/mt0.ark" "$tmp/mt3.ark" || fail "threads: the hit after rewriting differs"
  # a reader that leaves early (3 of 160 aligned) on that hit: the uncached run's lines
  for c in 0 "$C"; do
    KALDI_GPU_FEATS_THREADS=4 KALDI_GPU_FEATS_CACHE=$c "$BIN/gmm-align-compiled" --use-gpu=no $opts \
      --verbose=1 models/tri2/final.mdl "ark:$tmp/g3" "${f/ark,s,cs:/ark:}" "ark:$tmp/mte.ali" 2>"$tmp/mte.log"
    echo $? >"$tmp/mte.rc"
    grep -v "^VLOG" "$tmp/mte.log" | sort >"$tmp/mte.$([ "$c" = 0 ] && echo ref || echo hit).log"
    mv "$tmp/mte.ali" "$tmp/mte.$([ "$c" = 0 ] && echo ref || echo hit).ali"
  done
  grep -q "Feature cache: hit .*checked on 4 threads" "$tmp/mte.log" || fail "threads: early reader not a hit"
  [ "$(cat "$tmp/mte.rc")" = 0 ] || fail "threads: early reader on a hit exit $(cat "$tmp/mte.rc")"
  cmp -s "$tmp/mte.ref.ali" "$tmp/mte.hit.ali" || fail "threads: early reader's alignments differ"
  diff "$tmp/mte.ref.log" "$tmp/mte.hit.log" >/dev/null || fail "threads: early reader's stderr differs"
else
  fail "threads: no entry"
fi
rm -rf "$C"
f="ark:apply-cmvn --utt2spk=ark:$d/utt2spk scp:$d/cmvn.scp scp:$d/feats.scp ark:- | splice-feats ark:- ark:- | transform-feats $tmp/none.mat ark:- ark:- |"
"$TOOLS/feat-copy" "$f" "ark:$tmp/fail.ark" 2>/dev/null && fail "failing chain: exit 0"
[ "$(entries)" = 0 ] || fail "failing chain: an entry written"
ls "$C"/tmp.* >/dev/null 2>&1 && fail "temporary files left behind"

# The budget: too small for anything; room for two of three.
rm -rf "$C"
[ "$(KALDI_GPU_FEATS_CACHE_MAX=64K copy "$(chain "$d" lda)" b0)" = miss ] || fail "budget: not a miss"
[ "$(entries)" = 0 ] || fail "budget 64K: an entry written"
for k in ldasel lda sat; do copy "$(chain "$d" $k)" size.$k >/dev/null; done
[ "$(entries)" = 3 ] || fail "budget: $(entries) entries for three chains"
big=$(du -B1 -c "$C"/*.fc | tail -n 1 | cut -f1)
small=$(du -B1 "$C"/*.fc | sort -n | head -n 1 | cut -f1)
rm -rf "$C"
export KALDI_GPU_FEATS_CACHE_MAX=$(( big - small / 2 ))
for k in ldasel lda sat; do copy "$(chain "$d" $k)" lru.$k >/dev/null; done
[ "$(entries)" = 2 ] || fail "LRU: $(entries) entries, expected 2 (budget $KALDI_GPU_FEATS_CACHE_MAX)"
[ "$(copy "$(chain "$d" ldasel)" lru.ldasel2)" = miss ] || fail "LRU: the oldest entry was kept"
[ "$(copy "$(chain "$d" sat)" lru.sat2)" = hit ] || fail "LRU: the newest entry was removed"
unset KALDI_GPU_FEATS_CACHE_MAX

# Two writers of the same key at once: one entry, a hit after.
rm -rf "$C"
f=$(chain "$d" sat)
"$TOOLS/feat-copy" "$f" "ark:$tmp/w1.ark" 2>/dev/null &
"$TOOLS/feat-copy" "$f" "ark:$tmp/w2.ark" 2>/dev/null
wait
cmp -s "$tmp/w1.ark" "$tmp/w2.ark" || fail "concurrent: the writers' outputs differ"
[ "$(entries)" = 1 ] || fail "concurrent: $(entries) entries"
[ "$(copy "$f" w3)" = hit ] || fail "concurrent: no hit after"
cmp -s "$tmp/w1.ark" "$tmp/w3.ark" || fail "concurrent: the hit differs"

[ $n = 8 ] || fail "ran $n program cases"
if [ $fails -gt 0 ]; then echo "featcache: $fails failure(s)"; exit 1; fi
echo "featcache: $n program cases (miss and hit = uncached), changed inputs, broken entries, budget, concurrency"
exit 0
