#!/usr/bin/env bash
# Kaldi's steps/train_mono.sh (flat start, monophones, delta features with
# per-speaker CMN) with the same arguments, options and experiment
# directory, its iteration loop run by one process (gmm-train-gpu: graphs
# compiled once, features computed once, alignment and accumulation fused,
# gmm-est in process). Models are the stock script's, byte for byte
# (docs/trainer.md). Extra options: the block after Kaldi's.

# Begin configuration section.
nj=4
cmd=run.pl
scale_opts="--transition-scale=1.0 --acoustic-scale=0.1 --self-loop-scale=0.1"
num_iters=40    # Number of iterations of training
max_iter_inc=30 # Last iter to increase #Gauss on.
initial_beam=6  # beam used in the first iteration
regular_beam=10 # beam used after the first iteration
retry_beam=40
totgauss=1000   # Target #Gaussians.
careful=false
boost_silence=1.0 # Factor by which to boost silence likelihoods in alignment
realign_iters="1 2 3 4 5 6 7 8 9 10 12 14 16 18 20 23 26 29 32 35 38";
config=         # name of config file.
stage=-4
power=0.25      # exponent to determine number of gaussians from occurrence counts
norm_vars=false # deprecated, prefer --cmvn-opts "--norm-vars=false"
cmvn_opts=      # can be used to add extra options to cmvn.
delta_opts=     # can be used to add extra options to add-deltas
# GPU trainer (not in Kaldi's script):
use_gpu=optional     # yes|no|optional|wait
num_threads=0        # CPU threads of the trainer (0: its share of the cores)
stochastic_batch=0   # >0: stochastic mode, this fraction of the data per update
stochastic_passes=0  # stochastic mode: full data passes (0: num_iters - 1)
stochastic_memory=1  # stochastic mode: fraction of the data whose statistics are merged
stochastic_level=speaker  # speaker|utterance
stochastic_seed=777
# End configuration section.

echo "$0 $@"  # Print the command line for logging

if [ -f path.sh ]; then . ./path.sh; fi
. parse_options.sh || exit 1;

if [ $# != 3 ]; then
  echo "Usage: steps-gpu/train_mono.sh [options] <data-dir> <lang-dir> <exp-dir>"
  echo " e.g.: steps-gpu/train_mono.sh data/train.1k data/lang exp/mono"
  echo "main options (for others, see top of script file)"
  echo "  --config <config-file>                           # config containing options"
  echo "  --nj <nj>                                        # number of parallel jobs"
  echo "  --cmd (utils/run.pl|utils/queue.pl <queue opts>) # how to run jobs."
  echo "  --use-gpu (yes|no|optional|wait)                 # where the trainer runs"
  echo "  --stochastic-batch <fraction>                    # stochastic mode (docs/trainer.md)"
  exit 1;
fi

data=$1
lang=$2
dir=$3

. "$(dirname "$(readlink -f "$0")")/lib/trainer.sh" || exit 1

oov_sym=`cat $lang/oov.int` || exit 1;

mkdir -p $dir/log
echo $nj > $dir/num_jobs
sdata=$data/split$nj;
[[ -d $sdata && $data/feats.scp -ot $sdata ]] || split_data.sh $data $nj || exit 1;

cp $lang/phones.txt $dir || exit 1;

$norm_vars && cmvn_opts="--norm-vars=true $cmvn_opts"
echo $cmvn_opts  > $dir/cmvn_opts # keep track of options to CMVN.
[ ! -z $delta_opts ] && echo $delta_opts > $dir/delta_opts # keep track of options to delta

feats="ark,s,cs:apply-cmvn $cmvn_opts --utt2spk=ark:$sdata/JOB/utt2spk scp:$sdata/JOB/cmvn.scp scp:$sdata/JOB/feats.scp ark:- | add-deltas $delta_opts ark:- ark:- |"
example_feats="`echo $feats | sed s/JOB/1/g`";

echo "$0: Initializing monophone system."

[ ! -f $lang/phones/sets.int ] && exit 1;
shared_phones_opt="--shared-phones=$lang/phones/sets.int"

if [ $stage -le -3 ]; then
  # JOB=1 is enough: gmm-init-mono only needs a subset.
  if ! feat_dim=`feat-to-dim "$example_feats" - 2>/dev/null` || [ -z $feat_dim ]; then
    feat-to-dim "$example_feats" -
    echo "error getting feature dimension"
    exit 1;
  fi
  $cmd JOB=1 $dir/log/init.log \
    gmm-init-mono $shared_phones_opt "--train-feats=$feats subset-feats --n=10 ark:- ark:-|" $lang/topo $feat_dim \
    $dir/0.mdl $dir/tree || exit 1;
fi

numgauss=`gmm-info --print-args=false $dir/0.mdl | grep gaussians | awk '{print $NF}'`
incgauss=$[($totgauss-$numgauss)/$max_iter_inc] # per-iter increment for #Gauss

# Stages -2 (training graphs), -1 (equal alignment, pass-0 statistics), 0
# (the first update) and the iterations are the trainer's. A restart at
# stage s > 0 needs EXP/s.mdl and EXP/ali.JOB.gz (the trainer keeps the
# latest model on disk); the Gaussian target is the one of iteration s.
if [ $stage -le 0 ]; then
  start_opts=(--equal-align=true --start-gauss=$numgauss)
else
  x=1; while [ $x -lt $stage ]; do [ $x -le $max_iter_inc ] && numgauss=$[$numgauss+$incgauss]; x=$[$x+1]; done
  start_opts=(--start-iter=$stage "--ali-in=ark:gunzip -c $dir/ali.JOB.gz|" --start-gauss=$numgauss)
fi
echo "$0: Pass 0 to $[$num_iters-1] in one process ($gpu_trainer)"
rm -f $dir/phone_stats.*.gz  # the trainer's: none left from an earlier run
$cmd $dir/log/train.log \
  $gpu_trainer --nj=$nj --lang=$lang --sdata=$sdata --feats="$feats" \
    --text="ark:sym2int.pl --map-oov $oov_sym -f 2- $lang/words.txt < $sdata/JOB/text|" \
    "${start_opts[@]}" --num-iters=$num_iters --realign-iters="$realign_iters" \
    --max-iter-inc=$max_iter_inc --inc-gauss=$incgauss --power=$power \
    $scale_opts --first-beam=$initial_beam --beam=$regular_beam --retry-beam=$retry_beam \
    --careful=$careful --boost-silence=$boost_silence --ali-text=true \
    --silence-phones=`cat $lang/phones/optional_silence.csl` \
    --phone-stats=true $(gpu_trainer_opts) $dir || exit 1;

# analyze_alignments.sh, its per-job pipes done by the trainer
gpu_analyze_alignments "$cmd" $lang $dir
utils/summarize_warnings.pl $dir/log

steps/info/gmm_dir_info.pl $dir

echo "$0: Done training monophone system in $dir"

exit 0
