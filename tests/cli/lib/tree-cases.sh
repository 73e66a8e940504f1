# Sourced by tests/cli/tree.sh and dev/oracles/tree-refs.sh: the cases of
# acc-tree-stats and sum-tree-stats, "NAME|PROGRAM|ARGUMENTS", run from
# tests/data; @OUT@ is the statistics' wxfilename, $T a scratch folder that
# tree_inputs T ACC fills (ACC: the acc-tree-stats that makes sum-tree-stats'
# inputs): alignments of parts of the 40 files, an alignment archive with
# one file missing, one of another length and one that ends inside a phone
# (edge.txt), phone maps.
sil=1:2:3:4:5:6:7:8:9:10
# the log lines compared, and how (program versions and VLOG levels left out)
tree_log_lines='(tree-stats|tree-accu|io-funcs|build-tree|build-tree-utils|cluster-phones)\.cc:|^(Usage|Accumulate|Sum|Train|Cluster)'
tree_log_sed='s/^VLOG\[[0-9]*\]/VLOG/; s/\[[^]]*\]//'
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
  "bt200|build-tree|--verbose=1 --max-leaves=200 \$T/all.acc \$T/roots tree/questions.qst models/topo @OUT@"
  "bttext|build-tree|--binary=false --verbose=1 --max-leaves=100 \$T/all.acc \$T/roots tree/questions.qst models/topo @OUT@"
  "btthresh|build-tree|--thresh=1000 \$T/all.acc \$T/roots tree/questions.qst models/topo @OUT@"
  "btcthresh|build-tree|--verbose=1 --cluster-thresh=500 --max-leaves=150 \$T/all.acc \$T/roots tree/questions.qst models/topo @OUT@"
  "btnoround|build-tree|--verbose=1 --round-num-leaves=false --max-leaves=120 \$T/all.acc \$T/roots tree/questions.qst models/topo @OUT@"
  "btfew|build-tree|--verbose=1 --max-leaves=50 \$T/all.acc \$T/roots tree/questions.qst models/topo @OUT@"
  "btmono|build-tree|--verbose=1 --max-leaves=150 \$T/all.acc \$T/roots-mono tree/questions.qst models/topo @OUT@"
  "btsingle|build-tree|--verbose=1 --max-leaves=300 \$T/all.acc \$T/roots-single tree/questions.qst models/topo @OUT@"
  "btunk|build-tree|--max-leaves=100 \$T/all.acc \$T/roots-unk tree/questions.qst models/topo @OUT@"
  "btunk2|build-tree|--max-leaves=100 \$T/all.acc \$T/roots-unk2 tree/questions.qst models/topo @OUT@"
  "btmiss|build-tree|--max-leaves=100 \$T/all.acc \$T/roots-miss tree/questions.qst models/topo @OUT@"
  "btnostats|build-tree|\$T/no-such.acc \$T/roots tree/questions.qst models/topo @OUT@"
  "btbadq|build-tree|\$T/all.acc \$T/roots models/mono/tree models/topo @OUT@"
  "btbadroots|build-tree|\$T/all.acc \$T/roots-bad tree/questions.qst models/topo @OUT@"
  "cp|cluster-phones|\$T/all.acc \$T/sets @OUT@"
  "cppcl|cluster-phones|--pdf-class-list=0:1:2 \$T/all.acc \$T/sets @OUT@"
  "cppcl2|cluster-phones|--pdf-class-list=2 --context-width=3 \$T/all.acc \$T/sets @OUT@"
  "cpnostats|cluster-phones|\$T/no-such.acc \$T/sets @OUT@"
  "cpbadsets|cluster-phones|\$T/all.acc \$T/sets-bad @OUT@"
  "cpusage|cluster-phones|\$T/all.acc \$T/sets"
  "btusage|build-tree|\$T/all.acc \$T/roots tree/questions.qst models/topo"
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
  # build-tree's roots: the silence phones share one root, the others in
  # fours (the recipe's sets); mono-like: silence not shared, not split;
  # single: one phone per root (a table on the central phone)
  awk '$1 !~ /^#/ && $2 > 0 { print $2 }' models/phones.txt |
    awk '$1 <= 10 { s = s " " $1; next } { b[int(($1 - 11) / 4)] = b[int(($1 - 11) / 4)] " " $1 }
         END { print substr(s, 2); for (i = 0; i in b; i++) print substr(b[i], 2) }' >"$t/sets"
  awk '{ print "shared split", $0 }' "$t/sets" >"$t/roots"
  { head -n 3 "$t/sets"; echo "11 x"; } >"$t/sets-bad"
  awk 'NR == 1 { print "not-shared not-split", $0; next } { print "shared split", $0 }' \
    "$t/sets" >"$t/roots-mono"
  awk '$1 !~ /^#/ && $2 > 0 { print "shared split", $2 }' models/phones.txt >"$t/roots-single"
  { cat "$t/roots"; echo "shared split 400"; } >"$t/roots-unk"
  { cat "$t/roots"; echo "not-shared not-split 400"; } >"$t/roots-unk2"
  head -n -1 "$t/roots" >"$t/roots-miss"
  { cat "$t/roots"; echo "shared split 0"; } >"$t/roots-bad"
  "$acc" --ci-phones=$sil models/mono/final.mdl ark:feats/delta.ark ark:kaldi/mono/ali.ark \
    "$t/all.acc" 2>/dev/null || return 1
  local p
  for p in a b c d; do
    "$acc" --ci-phones=$sil models/mono/final.mdl ark:feats/delta.ark ark,t:"$t/$p.ali" \
      "$t/$p.acc" 2>/dev/null || return 1
    "$acc" --binary=false --ci-phones=$sil models/mono/final.mdl ark:feats/delta.ark \
      ark,t:"$t/$p.ali" "$t/$p.txt" 2>/dev/null || return 1
  done
}
