# Sourced by tests/cli/twofeats.sh and dev/oracles/twofeats-refs.sh:
# gmm-acc-stats-twofeats's cases, "NAME|ARGUMENTS" (the statistics' wxfilename
# follows), run from tests/data ($D: tests/data/twofeats, $T: a scratch
# folder filled by twofeats_inputs). The posteriors: the tri2 alignment's
# (mllt/allpost.txt.gz), silence weighted 0 (mllt/post.txt.gz), several pdfs
# per frame (multi.txt.gz: up to 40 random pairs, zero weights among them),
# the featpipe utterances' (mllt/pipe-post.txt.gz). train_sat.sh's form:
# the speaker-adapted pipe first, the speaker-independent one second.
si_pipe="ark,s,cs:apply-cmvn --utt2spk=ark:featpipe/utt2spk scp:featpipe/cmvn.scp scp:featpipe/feats.scp ark:- | splice-feats --left-context=3 --right-context=3 ark:- ark:- | transform-feats featpipe/final.mat ark:- ark:- |"
sat_pipe="${si_pipe%|} | transform-feats --utt2spk=ark:featpipe/utt2spk ark,s,cs:featpipe/trans.ark ark:- ark:- |"
twofeats_cases=(
  "basic|models/tri2/final.mdl ark:feats/lda.ark ark:feats/delta.ark \"ark:gunzip -c mllt/allpost.txt.gz|\""
  "same|models/tri2/final.mdl ark:feats/lda.ark ark,s,cs:feats/lda.ark \"ark:gunzip -c mllt/allpost.txt.gz|\""
  "text|--binary=false models/tri2/final.mdl ark:feats/lda.ark ark:feats/delta.ark \"ark:gunzip -c mllt/allpost.txt.gz|\""
  "sil|models/tri2/final.mdl ark:feats/lda.ark ark:feats/delta.ark \"ark:gunzip -c mllt/post.txt.gz|\""
  "multi|models/tri2/final.mdl ark:feats/lda.ark ark:feats/delta.ark \"ark:gunzip -c \$D/multi.txt.gz|\""
  "sat|models/tri2/final.mdl '$sat_pipe' '$si_pipe' \"ark:gunzip -c mllt/pipe-post.txt.gz|\""
  "alipipe|models/tri2/final.mdl ark:feats/lda.ark ark:feats/delta.ark \"ark:gunzip -c mllt/tri2-ali.gz| ali-to-post ark:- ark:- |\""
  "miss2|models/tri2/final.mdl ark:feats/lda.ark scp:\$T/delta30.scp \"ark:gunzip -c mllt/allpost.txt.gz|\""
  "missp|models/tri2/final.mdl ark:feats/lda.ark ark:feats/delta.ark ark,t:\$T/miss.txt"
  "short|models/tri2/final.mdl ark:feats/lda.ark ark:feats/delta.ark ark,t:\$T/short.txt"
  "none|models/tri2/final.mdl ark:feats/lda.ark ark:feats/delta.ark ark:/dev/null"
  "dim|models/tri2/final.mdl ark:feats/delta.ark ark:feats/lda.ark \"ark:gunzip -c mllt/allpost.txt.gz|\""
  "usage|models/tri2/final.mdl ark:feats/lda.ark ark:feats/delta.ark"
)
twofeats_inputs() {
  T=$1 D=$2
  gunzip -c mllt/allpost.txt.gz >"$T/allpost.txt"
  head -30 "$T/allpost.txt" >"$T/miss.txt"
  # the second utterance three frames short ("[ TID 1 ]": 4 fields a frame)
  awk 'NR == 2 { s = $1; for (i = 2; i <= NF - 12; i++) s = s " " $i; $0 = s } { print }' \
    "$T/allpost.txt" >"$T/short.txt"
  head -30 feats/delta.scp >"$T/delta30.scp"
}
