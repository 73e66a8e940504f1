# Sourced by tests/cli/mllt.sh and dev/oracles/mllt-refs.sh: gmm-acc-mllt's
# cases (postpipe, wsp01, alipost: the posteriors pipe of the steps scripts), "NAME|ARGUMENTS" (the statistics' wxfilename follows), run from
# tests/data. mllt_inputs TMP DATA writes their derived posteriors into TMP
# (from DATA's post.txt.gz): the first 30 files only (miss), file 2 three
# frames short (short), three files with the first one all silence (sil).
mllt_cases=(
  "stage|--rand-prune=4.0 models/tri2/final.mdl ark:feats/lda.ark \"ark:gunzip -c \$D/post.txt.gz|\""
  "default|models/tri2/final.mdl ark:feats/lda.ark \"ark:gunzip -c \$D/post.txt.gz|\""
  "text|--binary=false --rand-prune=0.1 models/tri2/final.mdl ark:feats/lda.ark \"ark:gunzip -c \$D/post.txt.gz|\""
  "pipe|--rand-prune=4.0 models/tri2/final.mdl 'ark,s,cs:apply-cmvn --utt2spk=ark:featpipe/utt2spk scp:featpipe/cmvn.scp scp:featpipe/feats.scp ark:- | splice-feats --left-context=3 --right-context=3 ark:- ark:- | transform-feats featpipe/final.mat ark:- ark:- |' \"ark:gunzip -c \$D/pipe-post.txt.gz|\""
  "postpipe|--rand-prune=4.0 models/tri2/final.mdl ark:feats/lda.ark \"ark:gunzip -c \$D/tri2-ali.gz| ali-to-post ark:- ark:- | weight-silence-post 0.0 1:2:3:4:5:6:7:8:9:10 models/tri2/final.mdl ark:- ark:- |\""
  "wsp01|models/tri2/final.mdl ark:feats/lda.ark \"ark:gunzip -c \$D/tri2-ali.gz| ali-to-post ark:- ark:- | weight-silence-post 0.01 1:2:3:4:5:6:7:8:9:10 models/tri2/final.mdl ark:- ark:- |\""
  "alipost|models/tri2/final.mdl ark:feats/lda.ark \"ark:gunzip -c \$D/tri2-ali.gz| ali-to-post ark:- ark:- |\""
  "miss|models/tri2/final.mdl ark:feats/lda.ark ark,t:\$T/miss.txt"
  "short|models/tri2/final.mdl ark:feats/lda.ark ark,t:\$T/short.txt"
  "sil|models/tri2/final.mdl ark:feats/lda.ark ark,t:\$T/sil.txt"
  "none|models/tri2/final.mdl ark:feats/lda.ark ark:/dev/null"
  "dim|models/tri2/final.mdl ark:feats/delta.ark \"ark:gunzip -c \$D/post.txt.gz|\""
  "usage|models/tri2/final.mdl ark:feats/lda.ark"
)
# ali-to-post and weight-silence-post: "NAME|PROGRAM ARGUMENTS" (the
# posteriors wspecifier follows); their outputs do not depend on the profile.
sil_list=1:2:3:4:5:6:7:8:9:10
post_cases=(
  "a2p|ali-to-post \"ark:gunzip -c \$D/tri2-ali.gz|\""
  "a2p-text|ali-to-post ark:kaldi/tri2/ali.ark"
  "wsp0|weight-silence-post 0.0 $sil_list models/tri2/final.mdl \"ark:gunzip -c \$D/allpost.txt.gz|\""
  "wsp05|weight-silence-post 0.5 $sil_list models/tri2/final.mdl \"ark:gunzip -c \$D/allpost.txt.gz|\""
  "wsp-dist|weight-silence-post --distribute=true 0.3 $sil_list models/tri2/final.mdl ark,t:\$T/mixed.txt"
  "wsp-nosil|weight-silence-post 0.0 '' models/tri2/final.mdl \"ark:gunzip -c \$D/allpost.txt.gz|\""
  "wsp-badw|weight-silence-post x $sil_list models/tri2/final.mdl \"ark:gunzip -c \$D/allpost.txt.gz|\""
  "wsp-badp|weight-silence-post 0.0 1::2 models/tri2/final.mdl \"ark:gunzip -c \$D/allpost.txt.gz|\""
  "a2p-usage|ali-to-post ark:kaldi/tri2/ali.ark ark:- ark:-"
)
post_wspec() {  # the wspecifier of a post case: a2p-text writes text
  case $1 in a2p-text|wsp-dist) echo "ark,t:$2" ;; *) echo "ark:$2" ;; esac
}
mllt_inputs() {
  T=$1 D=$2
  gunzip -c "$D/post.txt.gz" >"$T/post.txt"
  head -30 "$T/post.txt" >"$T/miss.txt"
  awk 'NR == 2 { $0 = substr($0, 1, length($0) - 12) } { print }' "$T/post.txt" >"$T/short.txt"
  awk 'NR == 1 { gsub(/\[ [0-9]+ 1 \]/, "[ ]") } { print }' "$T/post.txt" | head -3 >"$T/sil.txt"
  # frames of two pairs, silence and not, for --distribute
  awk 'NR <= 3 { gsub(/\[ [0-9]+ 1 \]/, "[ 3 0.25 6754 0.75 ]") } NR <= 3 { print }' "$T/post.txt" \
    >"$T/mixed.txt"
}
