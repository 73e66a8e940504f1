# Sourced by tests/cli/tree.sh and dev/oracles/tree-refs.sh: the cases of
# acc-tree-stats and sum-tree-stats, "NAME|PROGRAM|ARGUMENTS", run from
# tests/data; @OUT@ is the statistics' wxfilename, $T a scratch folder that
# tree_inputs T ACC fills (ACC: the acc-tree-stats that makes sum-tree-stats'
# inputs): alignments of parts of the 40 files, an alignment archive with
# one file missing, one of another length and one that ends inside a phone
# (edge.txt), phone maps.
sil=1:2:3:4:5:6:7:8:9:10
pipe_feats='ark,s,cs:apply-cmvn --utt2spk=ark:featpipe/utt2spk scp:featpipe/cmvn.scp scp:featpipe/feats.scp ark:- | add-deltas ark:- ark:- |'
tree_cases=(
  "mono|acc-tree-stats|--ci-phones=$sil models/mono/final.mdl ark:feats/delta.ark ark:kaldi/mono/ali.ark @OUT@"
  "text|acc-tree-stats|--binary=false --ci-phones=$sil models/mono/final.mdl ark:feats/delta.ark ark:kaldi/mono/ali.ark @OUT@"
  "noci|acc-tree-stats|models/mono/final.mdl ark:feats/delta.ark ark:kaldi/mono/ali.ark @OUT@"
  "w1|acc-tree-stats|--context-width=1 --central-position=0 --ci-phones=$sil models/mono/final.mdl ark:feats/delta.ark ark:kaldi/mono/ali.ark @OUT@"
  "w2|acc-tree-stats|--context-width=2 --central-position=1 --ci-phones=$sil models/mono/final.mdl ark:feats/delta.ark ark:kaldi/mono/ali.ark @OUT@"
  "w5|acc-tree-stats|--context-width=5 --central-position=2 --ci-phones=$sil --var-floor=0.5 --binary=false models/mono/final.mdl ark:feats/delta.ark ark:kaldi/mono/ali.ark @OUT@"
  "tri1|acc-tree-stats|--ci-phones=$sil models/tri1/final.mdl scp:feats/delta.scp \"ark:gzip -c kaldi/tri1/ali.ark | gunzip -c |\" @OUT@"
  "map|acc-tree-stats|--phone-map=\$T/map --ci-phones=1:2:3:4:5 models/mono/final.mdl ark:feats/delta.ark ark:kaldi/mono/ali.ark @OUT@"
  "edge|acc-tree-stats|--ci-phones=$sil models/mono/final.mdl ark:feats/delta.ark ark,t:\$T/edge.txt @OUT@"
  "pipe|acc-tree-stats|--ci-phones=$sil models/mono/final.mdl '$pipe_feats' ark,t:tree/pipe-ali.txt @OUT@"
  "none|acc-tree-stats|models/mono/final.mdl ark:feats/delta.ark ark:/dev/null @OUT@"
  "badci|acc-tree-stats|--ci-phones=0:1 models/mono/final.mdl ark:feats/delta.ark ark:kaldi/mono/ali.ark @OUT@"
  "badci2|acc-tree-stats|--ci-phones=1::2 models/mono/final.mdl ark:feats/delta.ark ark:kaldi/mono/ali.ark @OUT@"
  "badctx|acc-tree-stats|--central-position=3 models/mono/final.mdl ark:feats/delta.ark ark:kaldi/mono/ali.ark @OUT@"
  "mapline|acc-tree-stats|--phone-map=\$T/map-line models/mono/final.mdl ark:feats/delta.ark ark:kaldi/mono/ali.ark @OUT@"
  "mapempty|acc-tree-stats|--phone-map=\$T/map-empty models/mono/final.mdl ark:feats/delta.ark ark:kaldi/mono/ali.ark @OUT@"
  "mapnone|acc-tree-stats|--phone-map=\$T/no-such-map models/mono/final.mdl ark:feats/delta.ark ark:kaldi/mono/ali.ark @OUT@"
  "maprange|acc-tree-stats|--phone-map=\$T/map-short models/mono/final.mdl ark:feats/delta.ark ark:kaldi/mono/ali.ark @OUT@"
  "accusage|acc-tree-stats|models/mono/final.mdl ark:feats/delta.ark ark:kaldi/mono/ali.ark"
  "sum3|sum-tree-stats|@OUT@ \$T/a.acc \$T/b.acc \$T/c.acc"
  "sumtext|sum-tree-stats|--binary=false @OUT@ \$T/a.acc \$T/b.txt \$T/c.acc"
  "sumdup|sum-tree-stats|@OUT@ \$T/a.acc \$T/d.txt \$T/a.acc \$T/b.acc"
  "sum1|sum-tree-stats|@OUT@ \$T/c.txt"
  "sumbad|sum-tree-stats|@OUT@ \$T/a.acc models/mono/tree \$T/b.acc"
  "summiss|sum-tree-stats|@OUT@ \$T/a.acc \$T/no-such.acc"
  "sumusage|sum-tree-stats|@OUT@"
)

# tree_inputs T ACC: the derived inputs (see above); run from tests/data.
tree_inputs() {
  local t=$1 acc=$2
  awk 'NR == 1 { next }
       NR == 2 { getline nxt; $0 = $1 substr(nxt, index(nxt, " ")) }
       NR == 4 { $NF = $(NF - 1) }
       { print }' kaldi/mono/ali.txt >"$t/edge.txt"
  awk '$2 !~ /^#/ && $2 > 0 { print $2, int(($2 + 1) / 2) }' models/phones.txt >"$t/map"
  printf '1 1\n2\n' >"$t/map-line"
  : >"$t/map-empty"
  printf '1 1\n' >"$t/map-short"
  sed -n 1,15p kaldi/mono/ali.txt >"$t/a.ali"
  sed -n 16,30p kaldi/mono/ali.txt >"$t/b.ali"
  sed -n 31,40p kaldi/mono/ali.txt >"$t/c.ali"
  sed -n 10,25p kaldi/mono/ali.txt >"$t/d.ali"
  local p
  for p in a b c d; do
    "$acc" --ci-phones=$sil models/mono/final.mdl ark:feats/delta.ark ark,t:"$t/$p.ali" \
      "$t/$p.acc" 2>/dev/null || return 1
    "$acc" --binary=false --ci-phones=$sil models/mono/final.mdl ark:feats/delta.ark \
      ark,t:"$t/$p.ali" "$t/$p.txt" 2>/dev/null || return 1
  done
}
