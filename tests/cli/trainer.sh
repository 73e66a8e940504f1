#!/bin/bash
# steps-gpu/train_mono.sh, train_deltas.sh and train_lda_mllt.sh (one
# process: gmm-train-gpu, the CPU path here) against Kaldi's stock scripts on
# the 300 shortest utterances of the synth-s5 corpus, each stage started
# from the stock side's previous one:
#   train_mono --nj 11 --num-iters 5 --totgauss 300 (equal alignment, a
#     realignment every iteration with the initial beam first, mixing up,
#     eleven jobs: the statistics summed in the glob's order 1, 10, 11, 2, ...)
#   train_deltas --num-iters 6 --realign-iters "2 5" --boost-silence 1.25 200 800
#   train_lda_mllt --num-iters 6 --realign-iters 4 --mllt-iters "2 3" 250 1000
#   train_deltas as above on train_200 (another split than mono's) with both
#     sides on OpenBLAS's Prescott kernels (OPENBLAS_CORETYPE)
# must leave identical final.mdl, final.occs, final.mat, alignments and
# training graphs (ali.*.gz and fsts.*.gz gunzipped, alignments in text for
# mono as the stock script writes), the same files (but log/train.log and
# the MLLT hook), and update.X.log / acc.X.JOB.log / align.X.JOB.log /
# compile_graphs.JOB.log / get_phone_alignments.JOB.log with the same
# messages (the framing and echoed command lines aside), the same
# analyze_alignments.log (its per-job step is the trainer's), and mono's
# phone_stats.JOB.gz as the stock pipe makes them. Then the stochastic mode (seeded, reproducible),
# wrong options (an error before any work), unreadable transcripts and
# features (also a transcript met by the compilation beside the
# iterations), and the rest of a recipe on our
# directories (align_si --use-graphs true, align_si, train_sat, mkgraph,
# decode), and train_deltas on the emulated device (make emu). Needs the Kaldi bundle and
# the corpus (else SKIP); ours run with the rounding profile of this host's
# Kaldi (recipe-setup.sh). Env: BIN, TOP. Exit 0 pass, 1 fail, 77 skip.
set -u
: "${BIN:?}" "${TOP:?}"
. "$TOP/tests/cli/lib/recipe-setup.sh"
[ -x "$BIN/gmm-train-gpu" ] || { echo "SKIP: $BIN/gmm-train-gpu not built"; exit 77; }
recipe_inputs
tmp=$(mktemp -d /tmp/trainer-cli.XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
recipe_kaldi "$tmp"
recipe_rounding "$tmp"
recipe_corpus "$tmp"
cd "$tmp/synth-s5" || exit 1
export KALDI_BUNDLE=$kb GPU_BIN=""
# Kaldi's programs first (path.sh), ours only through steps-gpu, which finds
# gmm-train-gpu on PATH: the one of BIN (the sanitizer build's under
# make test-asan), alone in a directory of its own.
. ./path.sh
mkdir -p "$tmp/trainer-bin" && ln -s "$BIN/gmm-train-gpu" "$tmp/trainer-bin/" || exit 1
export PATH=$tmp/trainer-bin:$PATH
gpu=$TOP/steps-gpu

# Messages of a log (LEVEL message), experiment directories named alike.
msgs() {
  awk '/kio_log_ours/ {next}
       /^(LOG|WARNING|ERROR) \(/ { i = index($0, ") "); print $1 " " substr($0, i + 2) }' "$1" |
    sed -E 's#exp/[a-z0-9]+_(k|g)#exp/D#g' |
    grep -vE '^LOG (Aligning on the CPU|Using GPU|No GPU|GPU not usable)'
}
# compare NAME: the two experiment directories exp/NAME_k (stock), exp/NAME_g.
compare() {
  local k=exp/$1_k g=exp/$1_g f
  for f in final.mdl final.occs ${2:-}; do
    cmp -s "$k/$f" "$g/$f" || fail "$1: $f differs from the stock script's"
  done
  local nk ng
  nk=$(ls $k/ali.*.gz | wc -l); ng=$(ls $g/ali.*.gz | wc -l)
  [ "$nk" = "$ng" ] || fail "$1: $ng alignment files, stock $nk"
  for f in $k/ali.*.gz; do
    cmp -s <(gunzip -c "$f") <(gunzip -c "$g/${f##*/}") || fail "$1: ${f##*/} differs (gunzipped)"
  done
  for f in $k/log/update.*.log $k/log/acc.*.log $k/log/align.*.log $k/log/get_phone_alignments.*.log; do
    [ -f "$g/log/${f##*/}" ] || { fail "$1: no log/${f##*/}"; continue; }
    # the lines of the feature pipes (computed once, in process) aside; pass
    # 0's log holds the two programs of one pipe (align-equal-compiled |
    # gmm-acc-stats-ali), whose lines interleave as the scheduler lets them
    local order=cat
    case ${f##*/} in align.0.*) order=sort ;; esac
    diff <(msgs "$f" | grep -vE '^LOG (Applied cepstral|Spliced|Applied transform|Overall average \[pseudo-\]logdet)' | $order) \
      <(msgs "$g/log/${f##*/}" | $order) >"$tmp/d" || { fail "$1: log/${f##*/} messages differ:"; head -n 6 "$tmp/d"; }
  done
  for f in $k/fsts.*.gz; do
    [ -f "$g/${f##*/}" ] || { fail "$1: no ${f##*/}"; continue; }
    cmp -s <(gunzip -c "$f") <(gunzip -c "$g/${f##*/}") || fail "$1: ${f##*/} differs (gunzipped)"
  done
  for f in $k/log/compile_graphs.*.log; do
    diff <(msgs "$f") <(msgs "$g/log/${f##*/}") >"$tmp/d" ||
      { fail "$1: log/${f##*/} messages differ:"; head -n 6 "$tmp/d"; }
  done
  # analyze_alignments.sh (its per-job step done by the trainer): the same
  # summary, and the same lines on the script's output
  diff <(grep -v '^#' $k/log/analyze_alignments.log) <(grep -v '^#' $g/log/analyze_alignments.log) \
    >"$tmp/d" || { fail "$1: log/analyze_alignments.log differs:"; head -n 6 "$tmp/d"; }
  [ -s $k/log/analyze_alignments.log ] || fail "$1: no log/analyze_alignments.log"
  local ak ag
  ak=$(grep -c '^steps/diagnostic/analyze_alignments.sh' "$tmp/$1.k.out")
  ag=$(diff <(grep '^steps/diagnostic/analyze_alignments.sh' "$tmp/$1.k.out" | sed "s#$k#D#g") \
            <(grep '^steps/diagnostic/analyze_alignments.sh' "$tmp/$1.g.out" | sed "s#$g#D#g") | wc -l)
  [ "$ak" -ge 2 ] && [ "$ag" = 0 ] || fail "$1: analyze_alignments.sh's lines differ from the stock script's"
  # the same files, but for the trainer's log and the MLLT hook
  diff <(cd $k && find . | sort) <(cd $g && find . | grep -vxE './(log/train.log|mllt_step.sh)' | sort) \
    >"$tmp/d" || { fail "$1: not the stock script's files:"; head -n 6 "$tmp/d"; }
  grep -q "kaldi-gpu-align" $g/log/train.log || fail "$1: log/train.log is not gmm-train-gpu's"
}

run() {  # NAME SCRIPT ARGS...: stock (NAME_k) and ours (NAME_g)
  local name=$1 script=$2; shift 2
  steps/$script "$@" exp/${name}_k >"$tmp/$name.k.out" 2>&1 ||
    { tail -n 20 "$tmp/$name.k.out"; fail "stock $script"; return 1; }
  "$gpu/$script" --use-gpu no "$@" exp/${name}_g >"$tmp/$name.g.out" 2>&1 ||
    { tail -n 20 "$tmp/$name.g.out"; tail -n 20 exp/${name}_g/log/train.log; fail "steps-gpu/$script"; return 1; }
}
t0=$(date +%s)
run mono train_mono.sh --nj 11 --num-iters 5 --totgauss 300 data/train_300 data/lang && compare mono
# The trainer's phone_stats.JOB.gz (the script removes them once used)
# against the stock pipe of analyze_alignments.sh on its alignments, byte
# for byte uncompressed: its command of exp/mono_g again, into a copy.
if [ -f exp/mono_g/final.mdl ]; then
  rm -rf exp/mono_p && cp -r exp/mono_g exp/mono_p &&
    line=$(head -n 1 exp/mono_g/log/train.log | sed 's/^# //; s# exp/mono_g $# exp/mono_p#')
  if ( eval "$line" ) >"$tmp/p.out" 2>&1; then
    for f in exp/mono_p/ali.*.gz; do
      j=${f##*/ali.}; j=${j%.gz}
      cmp -s <(gunzip -c exp/mono_p/phone_stats.$j.gz) \
        <(ali-to-phones --write-lengths=true exp/mono_p/final.mdl "ark:gunzip -c $f|" ark,t:- 2>/dev/null |
          sed -E 's/^[^ ]+ //' |
          awk 'BEGIN{FS=" ; "; OFS="\n";} {print "begin " $1; if (NF>1) print "end " $NF; for (n=1;n<=NF;n++) print "all " $n; }' |
          sort | uniq -c) || fail "phone_stats.$j.gz differs from the stock pipe's"
    done
  else
    tail -n 5 "$tmp/p.out"; fail "the trainer's command again (phone_stats)"
  fi
fi
run tri train_deltas.sh --num-iters 6 --realign-iters "2 5" --boost-silence 1.25 \
  200 800 data/train_300 data/lang exp/mono_k && compare tri
run lda train_lda_mllt.sh --num-iters 6 --realign-iters 4 --mllt-iters "2 3" \
  --splice-opts "--left-context=3 --right-context=3" 250 1000 data/train_300 data/lang exp/tri_k &&
  compare lda final.mat
# Eleven jobs on another data directory than the alignments' (train_200, a
# subset of train_300 split 11 ways anew: each job uses its own ali.JOB.gz
# only, the others' utterances wait for the first realignment), with both
# sides on OpenBLAS's Prescott kernels (the H200 host's Kaldi: gmm-est's
# sums and sdot differ there; our programs follow the core Kaldi reports).
utils/subset_data_dir.sh data/train_300 200 data/train_200 >/dev/null 2>&1
export OPENBLAS_CORETYPE=Prescott
run split train_deltas.sh --num-iters 6 --realign-iters "2 5" --boost-silence 1.25 \
  200 800 data/train_200 data/lang exp/mono_k && compare split
grep -q "Rounding as OpenBLAS Prescott kernels" exp/split_g/log/train.log ||
  note="; Prescott not selectable here: split ran on this host's core$note"
unset OPENBLAS_CORETYPE
# The device path (make emu: CUDA emulated on the host, --use-gpu yes):
# the same models and alignments as the stock script.
emu=${EMU_BIN:-$TOP/build/emu/bin}/gmm-train-gpu
if [ -x "$emu" ]; then
  mkdir -p "$tmp/emu-bin" && ln -s "$emu" "$tmp/emu-bin/" || exit 1
  if PATH=$tmp/emu-bin:$PATH KALDI_GPU_SERVICE=no "$gpu/train_deltas.sh" --use-gpu yes --num-iters 6 \
      --realign-iters "2 5" --boost-silence 1.25 200 800 data/train_300 data/lang exp/mono_k exp/tri_e \
      >"$tmp/tri.e.out" 2>&1; then
    grep -q "Training on GPU: host emulation" exp/tri_e/log/train.log || fail "emulated device: not used"
    ! grep -q "summed on the host" exp/tri_e/log/train.log ||
      fail "emulated device: the jobs' statistics not summed on the device"
    cmp -s exp/tri_k/final.mdl exp/tri_e/final.mdl || fail "emulated device: final.mdl differs from the stock script's"
    for f in exp/tri_k/ali.*.gz; do
      cmp -s <(gunzip -c "$f") <(gunzip -c "exp/tri_e/${f##*/}") || fail "emulated device: ${f##*/} differs"
    done
  else
    tail -n 20 "$tmp/tri.e.out"; fail "steps-gpu/train_deltas.sh on the emulated device"
  fi
  note="; the device path (emulated) too$note"
else
  note="; device path not tested ($emu not built: make emu)$note"
fi

# Stochastic mode: seeded (the same seed, the same model), a full
# experiment directory; wrong values of its options fail before any work.
stoch() {  # NAME SEED
  "$gpu/train_deltas.sh" --use-gpu no --stochastic-batch 0.25 --stochastic-passes 2 \
    --stochastic-seed "$2" --num-iters 6 --realign-iters "2 5" 200 800 data/train_300 data/lang \
    exp/mono_k exp/$1 >"$tmp/$1.out" 2>&1 || { tail -n 20 "$tmp/$1.out"; fail "stochastic $1"; return 1; }
}
if stoch st_a 5 && stoch st_b 5 && stoch st_c 6; then
  cmp -s exp/st_a/final.mdl exp/st_b/final.mdl || fail "stochastic: the same seed gave another model"
  cmp -s exp/st_a/final.mdl exp/st_c/final.mdl && fail "stochastic: another seed gave the same model"
  grep -q "Stochastic training: 8 updates of 0.25 of the data" exp/st_a/log/train.log ||
    fail "stochastic: not 8 updates of 0.25 in log/train.log"
  for f in final.mdl final.occs tree ali.11.gz fsts.11.gz; do
    [ -s exp/st_a/$f ] || fail "stochastic: no $f"
  done
fi
for bad in "--stochastic-batch 1.5" "--stochastic-level word --stochastic-batch 0.5" \
           "--stochastic-batch 0.5 --stage 3" "--use-gpu maybe"; do
  # shellcheck disable=SC2086
  "$gpu/train_deltas.sh" $bad 200 800 data/train_300 data/lang exp/mono_k exp/bad >"$tmp/bad.out" 2>&1 &&
    fail "train_deltas.sh $bad: exit 0"
  grep -q "^$gpu/train_deltas.sh: --" "$tmp/bad.out" || fail "train_deltas.sh $bad: no error line"
  [ ! -e exp/bad ] || fail "train_deltas.sh $bad: work done before the error"
done

# Transcripts that cannot be read, of jobs 2 and 4 (the trainer opens the
# jobs' pipes ahead of the compilation): it stops at job 2 with the
# reader's errors naming it, as when the jobs were opened one by one; job
# 1's graphs are written whole, and job 4 (never reached) says nothing.
if [ -f exp/tri_k/final.mdl ] && [ -f exp/tri_g/fsts.1.gz ]; then
  rm -rf exp/txt_bad "$tmp/txt" && mkdir -p exp/txt_bad/log "$tmp/txt" &&
    cp exp/tri_k/tree exp/txt_bad/ && cp exp/tri_k/final.mdl exp/txt_bad/1.mdl || exit 1
  for j in $(seq 11); do
    utils/sym2int.pl --map-oov "$(cat data/lang/oov.int)" -f 2- data/lang/words.txt \
      <data/train_300/split11/$j/text >"$tmp/txt/$j" || exit 1
  done
  echo "bad-utt x y" >"$tmp/txt/2"
  echo "bad-utt x y" >"$tmp/txt/4"
  sd=data/train_300/split11
  "$BIN/gmm-train-gpu" --nj=11 --lang=data/lang --sdata=$sd --use-gpu=no --write-graphs=true \
    --feats="ark,s,cs:apply-cmvn --utt2spk=ark:$sd/JOB/utt2spk scp:$sd/JOB/cmvn.scp scp:$sd/JOB/feats.scp ark:- | add-deltas ark:- ark:- |" \
    --text="ark:cat $tmp/txt/JOB |" --num-iters=1 exp/txt_bad 2>"$tmp/txt_bad.err"
  r=$?
  [ $r -eq 255 ] || fail "unreadable transcripts: exit $r, not 255"
  grep -q "^ERROR .*rspecifier is ark:cat $tmp/txt/2 |" "$tmp/txt_bad.err" ||
    fail "unreadable transcripts: no ERROR naming job 2's"
  ! grep -q "txt/4" "$tmp/txt_bad.err" || fail "unreadable transcripts: lines of job 4, never reached"
  cmp -s <(gunzip -c exp/txt_bad/fsts.1.gz) <(gunzip -c exp/tri_g/fsts.1.gz) ||
    fail "unreadable transcripts: fsts.1.gz is not job 1's graphs"
  [ ! -e exp/txt_bad/fsts.2.gz ] && [ ! -e exp/txt_bad/log/compile_graphs.2.log ] ||
    fail "unreadable transcripts: job 2 has graphs or a log"
fi

# A transcript line that cannot be read at the end of job 3's, met by the
# compilation beside the iterations (realignment at 3: iterations 1 and 2
# need only the alignments): the run fails with the reader's ERROR and exit
# 255 before the realignment, no final model; the first iteration ran
# beside the compilation (its line is logged). With the graphs compiled
# first (KALDI_GPU_DEV_TRAIN_GRAPHS_BESIDE=0) no iteration runs.
if [ -f exp/tri_k/final.mdl ] && [ -d "$tmp/txt" ]; then
  for j in 2 3 4; do
    utils/sym2int.pl --map-oov "$(cat data/lang/oov.int)" -f 2- data/lang/words.txt \
      <data/train_300/split11/$j/text >"$tmp/txt/$j" || exit 1
  done
  echo "bad-utt x y" >>"$tmp/txt/3"
  sd=data/train_300/split11
  for beside in 1 0; do
    rm -rf exp/bg_bad && mkdir -p exp/bg_bad/log && cp exp/tri_k/tree exp/bg_bad/ &&
      cp exp/tri_k/final.mdl exp/bg_bad/1.mdl || exit 1
    KALDI_GPU_DEV_TRAIN_GRAPHS_BESIDE=$beside "$BIN/gmm-train-gpu" --nj=11 --lang=data/lang \
      --sdata=$sd --use-gpu=no --write-graphs=true --num-iters=4 --realign-iters=3 \
      --feats="ark,s,cs:apply-cmvn --utt2spk=ark:$sd/JOB/utt2spk scp:$sd/JOB/cmvn.scp scp:$sd/JOB/feats.scp ark:- | add-deltas ark:- ark:- |" \
      --ali-in="ark:gunzip -c exp/tri_k/ali.JOB.gz |" --text="ark:cat $tmp/txt/JOB |" \
      exp/bg_bad 2>"$tmp/bg_bad.err"
    r=$?
    [ $r -eq 255 ] || fail "graphs failing beside=$beside: exit $r, not 255"
    grep -q "^ERROR .*cat $tmp/txt/3 |" "$tmp/bg_bad.err" ||
      fail "graphs failing beside=$beside: no ERROR naming job 3's transcripts"
    ! grep -q "Iteration 3:" "$tmp/bg_bad.err" && [ ! -e exp/bg_bad/final.mdl ] ||
      fail "graphs failing beside=$beside: trained past the failure"
    if [ $beside = 1 ]; then
      grep -q "Iteration 1:" "$tmp/bg_bad.err" || fail "graphs failing beside: no iteration beside the compilation"
    else
      ! grep -q "Iteration 1:" "$tmp/bg_bad.err" || fail "graphs failing first: an iteration ran"
    fi
  done
fi

# Features that cannot be read, of jobs 2 and 4 (the jobs' features are read
# side by side): it stops at job 2 with the reader's errors naming it, as
# when the jobs were read one by one; job 4 says nothing.
if [ -f exp/tri_k/final.mdl ]; then
  rm -rf exp/feat_bad "$tmp/fsd" && mkdir -p exp/feat_bad/log &&
    cp exp/tri_k/tree exp/feat_bad/ && cp exp/tri_k/final.mdl exp/feat_bad/1.mdl || exit 1
  for j in $(seq 11); do
    mkdir -p "$tmp/fsd/$j" && cp data/train_300/split11/$j/feats.scp "$tmp/fsd/$j/" || exit 1
  done
  echo "bad-utt $tmp/missing-2.ark:9" >"$tmp/fsd/2/feats.scp"
  echo "bad-utt $tmp/missing-4.ark:9" >"$tmp/fsd/4/feats.scp"
  "$BIN/gmm-train-gpu" --nj=11 --lang=data/lang --sdata=data/train_300/split11 --use-gpu=no \
    --feats="scp:$tmp/fsd/JOB/feats.scp" --text="ark:cat data/train_300/split11/JOB/text |" \
    --num-iters=1 exp/feat_bad 2>"$tmp/feat_bad.err"
  r=$?
  [ $r -eq 255 ] || fail "unreadable features: exit $r, not 255"
  grep -q "^ERROR .*missing-2.ark" "$tmp/feat_bad.err" || fail "unreadable features: no ERROR naming job 2's"
  ! grep -q "missing-4" "$tmp/feat_bad.err" || fail "unreadable features: lines of job 4, never reached"
fi

# A stage before the loop that fails (acc-tree-stats on an unreadable
# alignment) while the trainer, started early, reads the features: the
# script fails with the stock script's output, and the trainer stops
# without training (its log says so, exit 0), the start file removed, no
# trainer left behind.
if [ -f exp/mono_k/final.mdl ]; then
  rm -rf exp/mono_bad exp/early_k exp/early_g && cp -r exp/mono_k exp/mono_bad &&
    echo garbage | gzip >exp/mono_bad/ali.2.gz || exit 1
  steps/train_deltas.sh 200 800 data/train_300 data/lang exp/mono_bad exp/early_k >"$tmp/early.k.out" 2>&1 &&
    fail "early start: the stock script did not fail"
  "$gpu/train_deltas.sh" 200 800 data/train_300 data/lang exp/mono_bad exp/early_g \
    >"$tmp/early.g.out" 2>&1 && fail "early start: the script did not fail"
  diff <(sed 's#^[^ ]*/train_deltas.sh#S#; s#exp/early_[kg]#exp/D#g' "$tmp/early.k.out") \
    <(sed 's#^[^ ]*/train_deltas.sh#S#; s#exp/early_[kg]#exp/D#g' "$tmp/early.g.out") >/dev/null ||
    fail "early start: the failing script's output is not the stock script's"
  grep -q "Not trained: exp/early_g/.trainer_start" exp/early_g/log/train.log &&
    grep -q "Ended (code 0)" exp/early_g/log/train.log || fail "early start: the trainer did not stop as asked"
  [ ! -e exp/early_g/.trainer_start ] || fail "early start: the start file left behind"
  ! pgrep -f "gmm-train-gpu.*exp/early_g" >/dev/null || fail "early start: a trainer left running"
fi

# The graphs started at the first model (the script says "model" after
# gmm-mixup, the trainer compiles beside convert-ali), with a convert-ali on
# GPU_BIN (the scripts' path.sh puts it first) that waits 4 s first:
# - then runs Kaldi's: the jobs compiled before "go" are logged and written
#   then, as the stock script's (models, alignments, graphs, logs, files);
#   the trainer says how many were compiled before "go" (at least one);
# - then fails: the script's output and files are the stock script's with
#   the same convert-ali (no fsts.JOB.gz, no compile_graphs.JOB.log), the
#   trainer discards the graphs it started and stops (exit 0), no start
#   file or trainer left.
if [ -f exp/tri_k/final.mdl ]; then
  mkdir -p "$tmp/slowconv" "$tmp/failconv" || exit 1
  printf '#!/bin/bash\nsleep 4\nexec %q "$@"\n' "$(command -v convert-ali)" >"$tmp/slowconv/convert-ali"
  printf '#!/bin/bash\nsleep 4\necho "ERROR (convert-ali[5.5]:main():convert-ali.cc:1) made to fail" >&2\nexit 1\n' \
    >"$tmp/failconv/convert-ali"
  chmod +x "$tmp/slowconv/convert-ali" "$tmp/failconv/convert-ali"
  rm -rf exp/slow_k exp/slow_g && ln -s tri_k exp/slow_k &&
    sed 's#exp/tri_k#exp/slow_k#g' "$tmp/tri.k.out" >"$tmp/slow.k.out" || exit 1
  if GPU_BIN=$tmp/slowconv "$gpu/train_deltas.sh" --use-gpu no --num-iters 6 --realign-iters "2 5" \
      --boost-silence 1.25 200 800 data/train_300 data/lang exp/mono_k exp/slow_g >"$tmp/slow.g.out" 2>&1; then
    compare slow
    n=$(sed -n 's/.*started at the first model: \([0-9]*\) of 11 jobs compiled when the script said go.*/\1/p' \
      exp/slow_g/log/train.log)
    [ -n "$n" ] && [ "$n" -ge 1 ] || fail "graphs at the first model: no job compiled before go (${n:-no line})"
  else
    tail -n 20 "$tmp/slow.g.out"; fail "graphs at the first model: steps-gpu/train_deltas.sh"
  fi
  rm -rf exp/conv_k exp/conv_g
  GPU_BIN=$tmp/failconv steps/train_deltas.sh 200 800 data/train_300 data/lang exp/mono_k exp/conv_k \
    >"$tmp/conv.k.out" 2>&1 && fail "failing convert-ali: the stock script did not fail"
  GPU_BIN=$tmp/failconv "$gpu/train_deltas.sh" 200 800 data/train_300 data/lang exp/mono_k exp/conv_g \
    >"$tmp/conv.g.out" 2>&1 && fail "failing convert-ali: the script did not fail"
  diff <(sed 's#^[^ ]*/train_deltas.sh#S#; s#exp/conv_[kg]#exp/D#g' "$tmp/conv.k.out") \
    <(sed 's#^[^ ]*/train_deltas.sh#S#; s#exp/conv_[kg]#exp/D#g' "$tmp/conv.g.out") >"$tmp/d" ||
    { fail "failing convert-ali: the script's output is not the stock script's:"; head -n 6 "$tmp/d"; }
  diff <(cd exp/conv_k && find . | sort) <(cd exp/conv_g && find . | grep -vx './log/train.log' | sort) \
    >"$tmp/d" || { fail "failing convert-ali: not the stock script's files:"; head -n 6 "$tmp/d"; }
  grep -q "Not trained: exp/conv_g/.trainer_start says the stages before the loop did not finish (the graphs started at the first model discarded)" \
    exp/conv_g/log/train.log && grep -q "Ended (code 0)" exp/conv_g/log/train.log ||
    fail "failing convert-ali: the trainer did not discard its graphs and stop as asked"
  [ ! -e exp/conv_g/.trainer_start ] || fail "failing convert-ali: the start file left behind"
  ! pgrep -f "gmm-train-gpu.*exp/conv_g" >/dev/null || fail "failing convert-ali: a trainer left running"
  # failing at once: the stop most likely comes while jobs are compiling
  # (or before the trainer has seen "model"): the stock script's files still
  sed -i 's/^sleep 4$/sleep 0/' "$tmp/failconv/convert-ali"
  rm -rf exp/conv_n
  GPU_BIN=$tmp/failconv "$gpu/train_deltas.sh" 200 800 data/train_300 data/lang exp/mono_k exp/conv_n \
    >"$tmp/conv.n.out" 2>&1 && fail "failing convert-ali at once: the script did not fail"
  diff <(cd exp/conv_k && find . | sort) <(cd exp/conv_n && find . | grep -vx './log/train.log' | sort) \
    >"$tmp/d" || { fail "failing convert-ali at once: not the stock script's files:"; head -n 6 "$tmp/d"; }
  grep -q "Ended (code 0)" exp/conv_n/log/train.log || fail "failing convert-ali at once: the trainer failed"
fi

# The rest of a recipe on our directories: the mono graphs reused by
# align_si.sh --use-graphs true, SAT on the LDA+MLLT system's alignments, a
# decoding graph and a decode (a few test utterances).
later() {  # LOG COMMAND...
  local log=$1; shift
  "$@" >"$tmp/$log" 2>&1 || { tail -n 20 "$tmp/$log"; fail "$*"; return 1; }
}
later ali_mono.out steps/align_si.sh --nj 11 --use-graphs true data/train_300 data/lang exp/mono_g exp/mono_g_ali
later ali_lda.out steps/align_si.sh --nj 11 data/train_300 data/lang exp/lda_g exp/lda_g_ali &&
  later sat.out steps/train_sat.sh --num-iters 3 --realign-iters 2 --fmllr-iters 2 250 1000 \
    data/train_300 data/lang exp/lda_g_ali exp/sat_g
utils/subset_data_dir.sh data/test 20 data/test_20 >/dev/null 2>&1
later mkgraph.out utils/mkgraph.sh data/lang_test exp/lda_g exp/lda_g/graph &&
  later decode.out steps/decode.sh --nj 2 exp/lda_g/graph data/test_20 exp/lda_g/decode &&
  { grep -qs WER exp/lda_g/decode/wer_* || fail "decode of exp/lda_g: no WER"; }
[ -L exp/lda_g/final.mat ] && [ "$(readlink exp/lda_g/final.mat)" = 3.mat ] || fail "lda: final.mat is not a link to 3.mat"
grep -q "training passes 1 to 5 in one process ($tmp/trainer-bin/gmm-train-gpu)" "$tmp/lda.g.out" ||
  fail "lda: the trainer of $BIN did not run"
[ $fails -eq 0 ] || exit 1
echo "trainer: train_mono, train_deltas, train_lda_mllt identical to the stock scripts (models, occs, mat, alignments, graphs, files, log messages), train_deltas on another split under Prescott too, stochastic mode seeded, wrong options refused, unreadable transcripts and features stop at their job, a transcript failing beside the iterations stops the run, graphs started at the first model (written at go as the stock script's, none when convert-ali fails), align_si/train_sat/mkgraph/decode on our directories ($(( $(date +%s) - t0 )) s)$note"
