#!/usr/bin/env bash
# Kaldi's steps/train_deltas.sh (triphones on delta+delta-delta features)
# with the same arguments, options and experiment directory. Kaldi builds
# the tree and the first model as in the stock script; the iteration loop
# runs in one process (gmm-train-gpu: graphs compiled once, features
# computed once, alignment and accumulation fused, gmm-est in process).
# Models are the stock script's, byte for byte (docs/trainer.md). Extra
# options: the block after Kaldi's.

# Begin configuration.
stage=-4 #  This allows restarting after partway, when something when wrong.
config=
cmd=run.pl
scale_opts="--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1"
realign_iters="10 20 30";
num_iters=35    # Number of iterations of training
max_iter_inc=25 # Last iter to increase #Gauss on.
beam=10
careful=false
retry_beam=40
boost_silence=1.0 # Factor by which to boost silence likelihoods in alignment
power=0.25 # Exponent for number of gaussians according to occurrence counts
cluster_thresh=-1  # for build-tree control final bottom-up clustering of leaves
norm_vars=false # deprecated.  Prefer --cmvn-opts "--norm-vars=true"
                # use the option --cmvn-opts "--norm-means=false"
cmvn_opts=
delta_opts=
context_opts=   # use"--context-width=5 --central-position=2" for quinphone
# GPU trainer (not in Kaldi's script):
use_gpu=optional     # yes|no|optional|wait
num_threads=0        # CPU threads of the trainer (0: its share of the cores)
stochastic_batch=0   # >0: stochastic mode, this fraction of the data per update
stochastic_passes=0  # stochastic mode: full data passes (0: num_iters - 1)
stochastic_memory=1  # stochastic mode: fraction of the data whose statistics are merged
stochastic_level=speaker  # speaker|utterance
stochastic_seed=777
early_start=true     # with a local --cmd (run.pl): the trainer reads the features
                     # and starts the device while Kaldi's stages build the tree
# End configuration.

echo "$0 $@"  # Print the command line for logging

[ -f path.sh ] && . ./path.sh;
. parse_options.sh || exit 1;

if [ $# != 6 ]; then
   echo "Usage: steps-gpu/train_deltas.sh <num-leaves> <tot-gauss> <data-dir> <lang-dir> <alignment-dir> <exp-dir>"
   echo "e.g.: steps-gpu/train_deltas.sh 2000 10000 data/train_si84_half data/lang exp/mono_ali exp/tri1"
   echo "main options (for others, see top of script file)"
   echo "  --cmd (utils/run.pl|utils/queue.pl <queue opts>) # how to run jobs."
   echo "  --config <config-file>                           # config containing options"
   echo "  --stage <stage>                                  # stage to do partial re-run from."
   echo "  --use-gpu (yes|no|optional|wait)                 # where the trainer runs"
   echo "  --stochastic-batch <fraction>                    # stochastic mode (docs/trainer.md)"
   exit 1;
fi

numleaves=$1
totgauss=$2
data=$3
lang=$4
alidir=$5
dir=$6

for f in $alidir/final.mdl $alidir/ali.1.gz $data/feats.scp $lang/phones.txt; do
  [ ! -f $f ] && echo "train_deltas.sh: no such file $f" && exit 1;
done

. "$(dirname "$(readlink -f "$0")")/lib/trainer.sh" || exit 1

numgauss=$numleaves
incgauss=$[($totgauss-$numgauss)/$max_iter_inc] # per-iter increment for #Gauss
oov=`cat $lang/oov.int` || exit 1;
ciphonelist=`cat $lang/phones/context_indep.csl` || exit 1;
nj=`cat $alidir/num_jobs` || exit 1;
mkdir -p $dir/log
echo $nj > $dir/num_jobs

utils/lang/check_phones_compatible.sh $lang/phones.txt $alidir/phones.txt || exit 1;
cp $lang/phones.txt $dir || exit 1;

sdata=$data/split$nj;
split_data.sh $data $nj || exit 1;


[ $(cat $alidir/cmvn_opts 2>/dev/null | wc -c) -gt 1 ] && [ -z "$cmvn_opts" ] && \
  echo "$0: warning: ignoring CMVN options from source directory $alidir"
$norm_vars && cmvn_opts="--norm-vars=true $cmvn_opts"
echo $cmvn_opts  > $dir/cmvn_opts # keep track of options to CMVN.
[ ! -z $delta_opts ] && echo $delta_opts > $dir/delta_opts

feats="ark,s,cs:apply-cmvn $cmvn_opts --utt2spk=ark:$sdata/JOB/utt2spk scp:$sdata/JOB/cmvn.scp scp:$sdata/JOB/feats.scp ark:- | add-deltas $delta_opts ark:- ark:- |"

rm $dir/.error 2>/dev/null

# The trainer's command (its first model EXP/S.mdl, S = max(stage, 1)).
x=1; [ $stage -gt 1 ] && x=$stage
i=1; while [ $i -lt $x ]; do [ $i -le $max_iter_inc ] && numgauss=$[$numgauss+$incgauss]; i=$[$i+1]; done
run_trainer() {
  $cmd $dir/log/train.log \
    $gpu_trainer --nj=$nj --lang=$lang --sdata=$sdata --feats="$feats" \
      --text="ark:utils/sym2int.pl --map-oov $oov -f 2- $lang/words.txt < $sdata/JOB/text |" \
      --start-iter=$x "--ali-in=ark:gunzip -c $dir/ali.JOB.gz|" --start-gauss=$numgauss \
      --num-iters=$num_iters --realign-iters="$realign_iters" \
      --max-iter-inc=$max_iter_inc --inc-gauss=$incgauss --power=$power \
      $scale_opts --beam=$beam --retry-beam=$retry_beam \
      --careful=$careful --boost-silence=$boost_silence \
      --silence-phones=`cat $lang/phones/optional_silence.csl` \
      --phone-stats=true $(gpu_trainer_opts) "$@" $dir
}
rm -f $dir/phone_stats.*.gz  # the trainer's: none left from an earlier run
# Started early (run.pl runs it here, in the background): it reads the
# features and starts the device beside Kaldi's stages below, then waits
# for $start_file, which says "model" once the tree and first model are
# written (it starts the graphs beside convert-ali), "go" once the stages
# are done, or "stop" if the script ends before (the trap).
start_file=$dir/.trainer_start
trainer_pid=
if $early_start && [ $stage -le -1 ] && [[ "$cmd" == *run.pl* ]]; then
  rm -f $start_file $start_file.tmp
  run_trainer --start-after=$start_file --start-after-pid=$$ &
  trainer_pid=$!
  trap '[ -n "$trainer_pid" ] && { [ "$(cat $start_file 2>/dev/null)" = go ] ||
    { echo stop >$start_file.tmp && mv $start_file.tmp $start_file; }; wait $trainer_pid; }
    rm -f $start_file $start_file.tmp' EXIT
fi

if [ $stage -le -3 ]; then
  echo "$0: accumulating tree stats"
  $cmd JOB=1:$nj $dir/log/acc_tree.JOB.log \
    acc-tree-stats $context_opts \
    --ci-phones=$ciphonelist $alidir/final.mdl "$feats" \
    "ark:gunzip -c $alidir/ali.JOB.gz|" $dir/JOB.treeacc || exit 1;
  sum-tree-stats $dir/treeacc $dir/*.treeacc 2>$dir/log/sum_tree_acc.log || exit 1;
  rm $dir/*.treeacc
fi

if [ $stage -le -2 ]; then
  echo "$0: getting questions for tree-building, via clustering"
  # preparing questions, roots file...
  cluster-phones $context_opts $dir/treeacc $lang/phones/sets.int \
    $dir/questions.int 2> $dir/log/questions.log || exit 1;
  cat $lang/phones/extra_questions.int >> $dir/questions.int
  compile-questions $context_opts $lang/topo $dir/questions.int \
    $dir/questions.qst 2>$dir/log/compile_questions.log || exit 1;

  echo "$0: building the tree"
  $cmd $dir/log/build_tree.log \
    build-tree $context_opts --verbose=1 --max-leaves=$numleaves \
    --cluster-thresh=$cluster_thresh $dir/treeacc $lang/phones/roots.int \
    $dir/questions.qst $lang/topo $dir/tree || exit 1;

  $cmd $dir/log/init_model.log \
    gmm-init-model  --write-occs=$dir/1.occs  \
      $dir/tree $dir/treeacc $lang/topo $dir/1.mdl || exit 1;
  if grep 'no stats' $dir/log/init_model.log; then
     echo "** The warnings above about 'no stats' generally mean you have phones **"
     echo "** (or groups of phones) in your phone set that had no corresponding data. **"
     echo "** You should probably figure out whether something went wrong, **"
     echo "** or whether your data just doesn't happen to have examples of those **"
     echo "** phones. **"
  fi

  gmm-mixup --mix-up=$numgauss $dir/1.mdl $dir/1.occs $dir/1.mdl 2>$dir/log/mixup.log || exit 1;
  if [ -n "$trainer_pid" ]; then echo model >$start_file.tmp && mv $start_file.tmp $start_file || exit 1; fi
  rm $dir/treeacc
fi

if [ $stage -le -1 ]; then
  # Convert the alignments.
  echo "$0: converting alignments from $alidir to use current tree"
  $cmd JOB=1:$nj $dir/log/convert.JOB.log \
    convert-ali $alidir/final.mdl $dir/1.mdl $dir/tree \
     "ark:gunzip -c $alidir/ali.JOB.gz|" "ark:|gzip -c >$dir/ali.JOB.gz" || exit 1;
fi

# Stage 0 (training graphs) and the iterations are the trainer's; it starts
# from EXP/S.mdl and EXP/ali.JOB.gz.
echo "$0: training passes $x to $[$num_iters-1] in one process ($gpu_trainer)"
if [ -n "$trainer_pid" ]; then
  echo go >$start_file.tmp && mv $start_file.tmp $start_file || exit 1
  wait $trainer_pid; r=$?
  trainer_pid=
  rm -f $start_file
  [ $r -eq 0 ] || exit 1
else
  run_trainer || exit 1
fi

# analyze_alignments.sh, its per-job pipes done by the trainer
gpu_analyze_alignments "$cmd" $lang $dir

# Summarize warning messages...
utils/summarize_warnings.pl  $dir/log

steps/info/gmm_dir_info.pl $dir

echo "$0: Done training system with delta+delta-delta features in $dir"

exit 0
