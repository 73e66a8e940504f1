#!/bin/bash
# Makes tests/data/featpipe from the recipe corpus and Kaldi's programs:
# 12 utterances (3 speakers) of compressed MFCC with their CMVN stats, the
# fixtures' LDA+MLLT matrix, per-speaker fMLLR-like transforms (one speaker
# missing), and for each case in cases.txt Kaldi's output (NAME.ark), stderr
# (NAME.log) and the pipeline's exit status (NAME.rc). OpenBLAS runs with the
# thread count in the case (T1/T2), as our emulation is told in the test.
# usage: dev/oracles/featpipe-refs.sh RECIPE_DIR (unpacked synth-s5) ; needs
# KALDI_BUNDLE (or Kaldi's featbin on PATH) and python3.
set -eu
rec=${1:?usage: $0 RECIPE_DIR}
top=$(cd "$(dirname "$0")/../.." && pwd)
out=$top/tests/data/featpipe
[ -n "${KALDI_BUNDLE:-}" ] && . "$KALDI_BUNDLE/env.sh"
mkdir -p "$out"
cd "$out"
python3 - "$rec" <<'PY'
import sys, struct
rec = sys.argv[1]
spks = ['en-029-f1', 'en-029-f2', 'en-029-f3']
u2s = [l.split() for l in open(rec + '/data/train/utt2spk')]
utts = {}
for u, s in u2s:
    if s in spks: utts.setdefault(s, []).append(u)
lens = dict(l.split() for l in open(rec + '/data/train/utt2num_frames'))
chosen = []
for s in spks:
    chosen += sorted(sorted(utts[s], key=lambda u: int(lens[u]))[:4])
feats = dict(l.split() for l in open(rec + '/data/train/feats.scp'))
def entry(rx):
    fn, off = rx.rsplit(':', 1); off = int(off)
    with open(fn, 'rb') as f:
        f.seek(off); d = f.read(1 << 22)
    return d
def obj_len(d):
    # compressed (CM/CM2/CM3) or FM/DM matrix starting with \0B
    assert d[:2] == b'\0B'
    t = d[2:5]
    if t == b'CM ':
        mn, rng, r, c = struct.unpack('<ffii', d[5:21]); return 21 + 8 * c + r * c
    if t == b'CM2':
        mn, rng, r, c = struct.unpack('<ffii', d[6:22]); return 22 + 2 * r * c
    if t == b'CM3':
        mn, rng, r, c = struct.unpack('<ffii', d[6:22]); return 22 + r * c
    r = struct.unpack('<i', d[6:10])[0]; c = struct.unpack('<i', d[11:15])[0]
    return 15 + r * c * (4 if t == b'FM ' else 8)
with open('raw.ark', 'wb') as a, open('feats.scp', 'w') as scp:
    for u in chosen:
        d = entry(feats[u]); n = obj_len(d)
        a.write(u.encode() + b' '); scp.write('%s featpipe/raw.ark:%d\n' % (u, a.tell())); a.write(d[:n])
cmvn = dict(l.split() for l in open(rec + '/data/train/cmvn.scp'))
with open('cmvn.ark', 'wb') as a, open('cmvn.scp', 'w') as scp, open('cmvn-miss.scp', 'w') as miss:
    for s in spks:
        d = entry(cmvn[s]); n = obj_len(d)
        a.write(s.encode() + b' ')
        line = '%s featpipe/cmvn.ark:%d\n' % (s, a.tell())
        scp.write(line)
        if s != spks[1]: miss.write(line)
        a.write(d[:n])
with open('utt2spk', 'w') as f:
    for u in chosen: f.write('%s %s\n' % (u, u[:9]))
with open('utt2spk-miss', 'w') as f:
    for u in chosen[:5] + chosen[6:]: f.write('%s %s\n' % (u, u[:9]))
import random
random.seed(5)
with open('trans.ark', 'wb') as f:
    for s in spks[:2]:
        f.write(s.encode() + b' \0BFM \x04' + struct.pack('<i', 40) + b'\x04' + struct.pack('<i', 41))
        v = [(1.0 if i == j else 0.0) + random.uniform(-0.05, 0.05) for i in range(40) for j in range(41)]
        f.write(struct.pack('<%df' % len(v), *v))
PY
cp "$top/../shared/fixtures/models/tri2/final.mat" final.mat
chmod u+w final.mat
cd "$out/.."
while IFS='|' read -r name threads pipe; do
  [ -z "$name" ] || [ "${name#\#}" != "$name" ] && continue
  set +e
  OPENBLAS_NUM_THREADS=$threads sh -c "$pipe" > "featpipe/$name.ark" 2> "featpipe/$name.log"
  echo $? > "featpipe/$name.rc"
  set -e
done < featpipe/cases.txt
