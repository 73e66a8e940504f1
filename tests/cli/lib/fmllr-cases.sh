# Sourced by tests/cli/fmllr.sh and dev/oracles/fmllr-refs.sh: gmm-est-fmllr's
# cases, "NAME|ARGUMENTS" (the transforms' wspecifier follows), run from
# tests/data; $D is tests/data/mllt (Kaldi's posteriors of the tri2
# alignment), $T a scratch folder that fmllr_inputs TMP fills: the
# posteriors of the first 30 files (miss), file 2 three frames short
# (short), featpipe's spk2utt. tests/data/fmllr/spk2utt: four speakers of
# nine files and one of four files and a file that does not exist (below
# the default min-count: Kaldi's warning, the unit transform). delta: the
# tri1 model's 39 dimensions (rows not a multiple of 4 floats).
fm_sil=1:2:3:4:5:6:7:8:9:10
fm_pipe="apply-cmvn --utt2spk=ark:featpipe/utt2spk scp:featpipe/cmvn.scp scp:featpipe/feats.scp ark:- | splice-feats --left-context=3 --right-context=3 ark:- ark:- | transform-feats featpipe/final.mat ark:- ark:-"
fmllr_cases=(
  "full|--spk2utt=ark:fmllr/spk2utt models/tri2/final.mdl ark:feats/lda.ark \"ark:gunzip -c \$D/post.txt.gz|\""
  "diag|--fmllr-update-type=diag --spk2utt=ark:fmllr/spk2utt models/tri2/final.mdl ark:feats/lda.ark \"ark:gunzip -c \$D/post.txt.gz|\""
  "offset|--fmllr-update-type=offset --spk2utt=ark:fmllr/spk2utt models/tri2/final.mdl ark:feats/lda.ark \"ark:gunzip -c \$D/post.txt.gz|\""
  "none|--fmllr-update-type=none --spk2utt=ark:fmllr/spk2utt models/tri2/final.mdl ark:feats/lda.ark \"ark:gunzip -c \$D/post.txt.gz|\""
  "text|--spk2utt=ark:fmllr/spk2utt models/tri2/final.mdl ark:feats/lda.ark \"ark:gunzip -c \$D/post.txt.gz|\""
  "iters|--fmllr-num-iters=3 --fmllr-min-count=50 --spk2utt=ark:fmllr/spk2utt models/tri2/final.mdl ark:feats/lda.ark \"ark:gunzip -c \$D/post.txt.gz|\""
  "utt|--fmllr-min-count=150 models/tri2/final.mdl ark:feats/lda.ark \"ark:gunzip -c \$D/post.txt.gz|\""
  "uttdiag|--fmllr-update-type=diag --fmllr-min-count=150 models/tri2/final.mdl ark:feats/lda.ark ark,t:\$T/short.txt"
  "miss|--spk2utt=ark:fmllr/spk2utt models/tri2/final.mdl ark:feats/lda.ark ark,t:\$T/miss.txt"
  "uttmiss|--fmllr-update-type=offset --fmllr-min-count=150 models/tri2/final.mdl ark:feats/lda.ark ark,t:\$T/miss.txt"
  "short|--fmllr-update-type=diag --spk2utt=ark:fmllr/spk2utt models/tri2/final.mdl ark:feats/lda.ark ark,t:\$T/short.txt"
  "postpipe|--spk2utt=ark:fmllr/spk2utt models/tri2/final.mdl ark:feats/lda.ark \"ark:gunzip -c \$D/tri2-ali.gz| ali-to-post ark:- ark:- | weight-silence-post 0.0 $fm_sil models/tri2/final.mdl ark:- ark:- |\""
  "pipe|--fmllr-min-count=100 --spk2utt=ark:\$T/spk2utt models/tri2/final.mdl 'ark,s,cs:$fm_pipe |' \"ark:gunzip -c \$D/pipe-post.txt.gz|\""
  "sat|--fmllr-min-count=100 --spk2utt=ark:\$T/spk2utt models/tri2/final.mdl 'ark,s,cs:$fm_pipe | transform-feats --utt2spk=ark:featpipe/utt2spk ark:featpipe/trans.ark ark:- ark:- |' \"ark:gunzip -c \$D/pipe-post.txt.gz|\""
  "delta|--fmllr-update-type=full --spk2utt=ark:fmllr/spk2utt models/tri1/final.mdl ark:feats/delta.ark \"ark:ali-to-post ark:kaldi/tri1/ali.ark ark:- | weight-silence-post 0.0 $fm_sil models/tri1/final.mdl ark:- ark:- |\""
  "badtype|--fmllr-update-type=foo --spk2utt=ark:fmllr/spk2utt models/tri2/final.mdl ark:feats/lda.ark \"ark:gunzip -c \$D/post.txt.gz|\""
  "dim|--spk2utt=ark:fmllr/spk2utt models/tri2/final.mdl ark:feats/delta.ark \"ark:gunzip -c \$D/post.txt.gz|\""
  "usage|--spk2utt=ark:fmllr/spk2utt models/tri2/final.mdl ark:feats/lda.ark"
)
fmllr_args() {  # the arguments of case NAME
  local c
  for c in "${fmllr_cases[@]}"; do [ "${c%%|*}" = "$1" ] && { echo "${c#*|}"; return; }; done
}
fmllr_wspec() {  # the wspecifier of a case: text writes text
  case $1 in text) echo "ark,t:$2" ;; *) echo "ark:$2" ;; esac
}
fmllr_inputs() {
  T=$1 D=$2
  gunzip -c "$D/post.txt.gz" >"$T/post.txt"
  head -30 "$T/post.txt" >"$T/miss.txt"
  awk 'NR == 2 { $0 = substr($0, 1, length($0) - 12) } { print }' "$T/post.txt" >"$T/short.txt"
  awk '{ u[$2] = u[$2] " " $1; if (!($2 in o)) { o[$2] = ++n; k[n] = $2 } }
       END { for (i = 1; i <= n; i++) print k[i] u[k[i]] }' featpipe/utt2spk >"$T/spk2utt"
}
