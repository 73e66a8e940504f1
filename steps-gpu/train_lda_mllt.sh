#!/usr/bin/env bash
# Kaldi's steps/train_lda_mllt.sh (spliced features, LDA, then MLLT/STC
# estimated over the iterations) with the same arguments, options and
# experiment directory. Kaldi estimates the LDA matrix, builds the tree and
# the first model as in the stock script; the iteration loop runs in one
# process (gmm-train-gpu), which hands each MLLT iteration to Kaldi's own
# programs (ali-to-post | weight-silence-post | gmm-acc-mllt, est-mllt,
# gmm-transform-means, compose-transforms, through a hook this script
# writes) and then recomputes its resident features with the new matrix.
# Models are the stock script's, byte for byte (docs/trainer.md). Extra
# options: the block after Kaldi's.

# Begin configuration.
cmd=run.pl
config=
stage=-5
scale_opts="--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1"
realign_iters="10 20 30";
mllt_iters="2 4 6 12";
num_iters=35    # Number of iterations of training
max_iter_inc=25  # Last iter to increase #Gauss on.
dim=40
beam=10
retry_beam=40
careful=false
boost_silence=1.0 # Factor by which to boost silence likelihoods in alignment
power=0.25 # Exponent for number of gaussians according to occurrence counts
randprune=4.0 # This is approximately the ratio by which we will speed up the
              # LDA and MLLT calculations via randomized pruning.
splice_opts=
cluster_thresh=-1  # for build-tree control final bottom-up clustering of leaves
norm_vars=false # deprecated.  Prefer --cmvn-opts "--norm-vars=false"
cmvn_opts=
context_opts=   # use "--context-width=5 --central-position=2" for quinphone.
# GPU trainer (not in Kaldi's script):
use_gpu=optional     # yes|no|optional|wait
num_threads=0        # CPU threads of the trainer (0: its share of the cores)
stochastic_batch=0   # >0: stochastic mode, this fraction of the data per update
stochastic_passes=0  # stochastic mode: full data passes (0: num_iters - 1)
stochastic_memory=1  # stochastic mode: fraction of the data whose statistics are merged
stochastic_level=speaker  # speaker|utterance
stochastic_seed=777
# End configuration.
train_tree=true  # if false, don't actually train the tree.
use_lda_mat=  # If supplied, use this LDA[+MLLT] matrix.

echo "$0 $@"  # Print the command line for logging

[ -f path.sh ] && . ./path.sh
. parse_options.sh || exit 1;

if [ $# != 6 ]; then
  echo "Usage: steps-gpu/train_lda_mllt.sh [options] <#leaves> <#gauss> <data> <lang> <alignments> <dir>"
  echo " e.g.: steps-gpu/train_lda_mllt.sh 2500 15000 data/train_si84 data/lang exp/tri1_ali_si84 exp/tri2b"
  echo "Main options (for others, see top of script file)"
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
  [ ! -f $f ] && echo "train_lda_mllt.sh: no such file $f" && exit 1;
done

. "$(dirname "$(readlink -f "$0")")/lib/trainer.sh" || exit 1

numgauss=$numleaves
incgauss=$[($totgauss-$numgauss)/$max_iter_inc] # per-iter #gauss increment
oov=`cat $lang/oov.int` || exit 1;
nj=`cat $alidir/num_jobs` || exit 1;
silphonelist=`cat $lang/phones/silence.csl` || exit 1;
ciphonelist=`cat $lang/phones/context_indep.csl` || exit 1;

mkdir -p $dir/log

utils/lang/check_phones_compatible.sh $lang/phones.txt $alidir/phones.txt || exit 1;
cp $lang/phones.txt $dir || exit 1;

echo $nj >$dir/num_jobs
echo "$splice_opts" >$dir/splice_opts # keep track of frame-splicing options
           # so that later stages of system building can know what they were.


[ $(cat $alidir/cmvn_opts 2>/dev/null | wc -c) -gt 1 ] && [ -z "$cmvn_opts" ] && \
  echo "$0: warning: ignoring CMVN options from source directory $alidir"
$norm_vars && cmvn_opts="--norm-vars=true $cmvn_opts"
echo $cmvn_opts > $dir/cmvn_opts # keep track of options to CMVN.

sdata=$data/split$nj;
split_data.sh $data $nj || exit 1;

splicedfeats="ark,s,cs:apply-cmvn $cmvn_opts --utt2spk=ark:$sdata/JOB/utt2spk scp:$sdata/JOB/cmvn.scp scp:$sdata/JOB/feats.scp ark:- | splice-feats $splice_opts ark:- ark:- |"
# Note: $feats gets overwritten later in the script.
feats="$splicedfeats transform-feats $dir/0.mat ark:- ark:- |"



if [ $stage -le -5 ]; then
  if [ -z "$use_lda_mat" ]; then
    echo "$0: Accumulating LDA statistics."
    rm $dir/lda.*.acc 2>/dev/null
    $cmd JOB=1:$nj $dir/log/lda_acc.JOB.log \
    ali-to-post "ark:gunzip -c $alidir/ali.JOB.gz|" ark:- \| \
      weight-silence-post 0.0 $silphonelist $alidir/final.mdl ark:- ark:- \| \
      acc-lda --rand-prune=$randprune $alidir/final.mdl "$splicedfeats" ark,s,cs:- \
      $dir/lda.JOB.acc || exit 1;
    est-lda --write-full-matrix=$dir/full.mat --dim=$dim $dir/0.mat $dir/lda.*.acc \
      2>$dir/log/lda_est.log || exit 1;
    rm $dir/lda.*.acc
  else
    echo "$0: Using supplied LDA matrix $use_lda_mat"
    cp $use_lda_mat $dir/0.mat || exit 1;
    [ ! -z "$mllt_iters" ] && \
      echo "$0: Warning: using supplied LDA matrix $use_lda_mat but we will do MLLT," && \
      echo "     which you might not want; to disable MLLT, specify --mllt-iters ''" && \
      sleep 5
  fi
fi

cur_lda_iter=0

if [ $stage -le -4 ] && $train_tree; then
  echo "$0: Accumulating tree stats"
  $cmd JOB=1:$nj $dir/log/acc_tree.JOB.log \
    acc-tree-stats $context_opts \
    --ci-phones=$ciphonelist $alidir/final.mdl "$feats" \
    "ark:gunzip -c $alidir/ali.JOB.gz|" $dir/JOB.treeacc || exit 1;
  [ `ls $dir/*.treeacc | wc -w` -ne "$nj" ] && echo "$0: Wrong #tree-accs" && exit 1;
  $cmd $dir/log/sum_tree_acc.log \
    sum-tree-stats $dir/treeacc $dir/*.treeacc || exit 1;
  rm $dir/*.treeacc
fi


if [ $stage -le -3 ] && $train_tree; then
  echo "$0: Getting questions for tree clustering."
  # preparing questions, roots file...
  cluster-phones $context_opts $dir/treeacc $lang/phones/sets.int \
    $dir/questions.int 2> $dir/log/questions.log || exit 1;
  cat $lang/phones/extra_questions.int >> $dir/questions.int
  compile-questions $context_opts $lang/topo $dir/questions.int \
    $dir/questions.qst 2>$dir/log/compile_questions.log || exit 1;

  echo "$0: Building the tree"
  $cmd $dir/log/build_tree.log \
    build-tree $context_opts --verbose=1 --max-leaves=$numleaves \
    --cluster-thresh=$cluster_thresh $dir/treeacc $lang/phones/roots.int \
    $dir/questions.qst $lang/topo $dir/tree || exit 1;
fi

if [ $stage -le -2 ]; then
  echo "$0: Initializing the model"
  if $train_tree; then
    gmm-init-model  --write-occs=$dir/1.occs  \
      $dir/tree $dir/treeacc $lang/topo $dir/1.mdl 2> $dir/log/init_model.log || exit 1;
    grep 'no stats' $dir/log/init_model.log && echo "This is a bad warning.";
    rm $dir/treeacc
  else
    cp $alidir/tree $dir/ || exit 1;
    $cmd JOB=1 $dir/log/init_model.log \
      gmm-init-model-flat $dir/tree $lang/topo $dir/1.mdl \
        "$feats subset-feats ark:- ark:-|" || exit 1;
  fi
fi


if [ $stage -le -1 ]; then
  # Convert the alignments.
  echo "$0: Converting alignments from $alidir to use current tree"
  $cmd JOB=1:$nj $dir/log/convert.JOB.log \
    convert-ali $alidir/final.mdl $dir/1.mdl $dir/tree \
     "ark:gunzip -c $alidir/ali.JOB.gz|" "ark:|gzip -c >$dir/ali.JOB.gz" || exit 1;
fi

# Stage 0 (training graphs) and the iterations are the trainer's; it starts
# from EXP/S.mdl and EXP/ali.JOB.gz (S = max(stage, 1)), with the features
# of the last MLLT iteration before S.
x=1; [ $stage -gt 1 ] && x=$stage
i=1; while [ $i -lt $x ]; do
  [ $i -le $max_iter_inc ] && numgauss=$[$numgauss+$incgauss]
  echo $mllt_iters | grep -w $i >/dev/null && cur_lda_iter=$i
  i=$[$i+1]
done
feats="$splicedfeats transform-feats $dir/$cur_lda_iter.mat ark:- ark:- |"

# The MLLT step of iteration ITER, run by the trainer (which wrote ITER.mdl
# and the current ali.JOB.gz, and reads back ITER.mdl and ITER.mat): the
# stock script's commands.
{
  echo "#!/usr/bin/env bash"
  echo "# Written by $0: the MLLT step of iteration \$ITER (steps/train_lda_mllt.sh's)."
  printf 'cmd=%q dir=%q nj=%q randprune=%q silphonelist=%q mllt_iters=%q\n' \
    "$cmd" "$dir" "$nj" "$randprune" "$silphonelist" "$mllt_iters"
  printf 'splicedfeats=%q\n' "$splicedfeats"
  cat <<'HOOK'
x=$ITER; cur_lda_iter=0
for i in $mllt_iters; do [ $i -lt $x ] && [ $i -gt $cur_lda_iter ] && cur_lda_iter=$i; done
feats="$splicedfeats transform-feats $dir/$cur_lda_iter.mat ark:- ark:- |"
echo "$0: Estimating MLLT"
$cmd JOB=1:$nj $dir/log/macc.$x.JOB.log \
  ali-to-post "ark:gunzip -c $dir/ali.JOB.gz|" ark:- \| \
  weight-silence-post 0.0 $silphonelist $dir/$x.mdl ark:- ark:- \| \
  gmm-acc-mllt --rand-prune=$randprune  $dir/$x.mdl "$feats" ark,s,o,cs:- $dir/$x.JOB.macc \
  || exit 1;
est-mllt $dir/$x.mat.new $dir/$x.*.macc 2> $dir/log/mupdate.$x.log || exit 1;
gmm-transform-means  $dir/$x.mat.new $dir/$x.mdl $dir/$x.mdl \
  2> $dir/log/transform_means.$x.log || exit 1;
compose-transforms --print-args=false $dir/$x.mat.new $dir/$cur_lda_iter.mat $dir/$x.mat || exit 1;
rm $dir/$x.*.macc
HOOK
} > $dir/mllt_step.sh

echo "$0: training passes $x to $[$num_iters-1] in one process ($gpu_trainer)"
$cmd $dir/log/train.log \
  $gpu_trainer --nj=$nj --lang=$lang --sdata=$sdata --feats="$feats" \
    --mllt-feats="$splicedfeats transform-feats $dir/ITER.mat ark:- ark:- |" \
    --mllt-iters="$mllt_iters" --mllt-hook="bash $dir/mllt_step.sh" \
    --text="ark:utils/sym2int.pl --map-oov $oov -f 2- $lang/words.txt < $data/split$nj/JOB/text |" \
    --start-iter=$x "--ali-in=ark:gunzip -c $dir/ali.JOB.gz|" --start-gauss=$numgauss \
    --num-iters=$num_iters --realign-iters="$realign_iters" \
    --max-iter-inc=$max_iter_inc --inc-gauss=$incgauss --power=$power \
    $scale_opts --beam=$beam --retry-beam=$retry_beam \
    --careful=$careful --boost-silence=$boost_silence \
    --silence-phones=`cat $lang/phones/optional_silence.csl` \
    $(gpu_trainer_opts) --write-graphs=$([ -n "$realign_iters" ] && echo true || echo false) \
    $dir || exit 1;

x=1; while [ $x -lt $num_iters ]; do echo $mllt_iters | grep -w $x >/dev/null && cur_lda_iter=$x; x=$[$x+1]; done
rm $dir/final.mat 2>/dev/null
ln -s $cur_lda_iter.mat $dir/final.mat

steps/diagnostic/analyze_alignments.sh --cmd "$cmd" $lang $dir

# Summarize warning messages...
utils/summarize_warnings.pl $dir/log

steps/info/gmm_dir_info.pl $dir

echo "$0: Done training system with LDA+MLLT features in $dir"

exit 0
