#!/usr/bin/env python3
"""kaldi_gpu_align.kalpy against Kaldi's outputs, called as MFA 3.4 calls
kalpy (alignment/multiprocessing.py: AlignFunction, AccStatsFunction):
  - FeatureArchive's chains (CMVN per speaker, deltas; splice + LDA; + fMLLR
    per speaker) = Kaldi's programs' outputs (tests/data/featpipe/*.ark);
  - GmmAligner(model, silence_phones=..., **align_options), boost_silence,
    export_alignments(..., word_file_name, likelihood_file_name, callback,
    utterance_parameters): the alignment archive byte-identical to
    gmm-align-compiled's, the words archive = the transcripts, per-frame
    likelihoods for every aligned utterance, kalpy's callback items;
  - GmmStatsAccumulator.accumulate_stats(..., callback, ignored_keys) and
    export_stats: gmm-acc-stats-ali's bytes, kalpy's callback counts;
  - align_utterance on in-memory graphs and features (kalpy's per-utterance
    call), the archive classes' iteration.
(kalpy_side_by_side.py covers the fixture sets and, with kalpy, kalpy itself.)
Exits 77 after "SKIP: why" without numpy or the library.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from testenv import DATA, require

np, kga = require()
from kaldi_gpu_align import kalpy as kk  # noqa: E402
import kaldi_ark  # noqa: E402

# MFA's align_options (AlignMixin.align_options) without boost_silence
MFA_ALIGN = dict(beam=10, retry_beam=40, acoustic_scale=0.1, transition_scale=1.0,
                 self_loop_scale=0.1, careful=False)


def utt2spk():
    with open("featpipe/utt2spk", encoding="utf-8") as f:
        return dict(line.split() for line in f if line.strip())


def same_matrices(test, got, ref_path):
    ref = kaldi_ark.read_float_matrices(ref_path)
    test.assertEqual([k for k, _ in got], [k for k, _ in ref])
    for (k, a), (_, b) in zip(got, ref):
        test.assertEqual(a.tobytes(), np.ascontiguousarray(b, np.float32).tobytes(), k)


class Features(unittest.TestCase):
    """Run in children with KALDI_GPU_BLAS_PROFILE=hsw (the featpipe
    references come from an AVX2 host's Kaldi, tests/cli/featpipe.sh) and
    transform-feats' thread counts of the references, 1 and 2."""

    def test_cmvn_deltas(self):
        fa = kk.FeatureArchive("featpipe/feats.scp", utt2spk=utt2spk(),
                               cmvn_file_name="featpipe/cmvn.scp", deltas=True)
        self.assertIn("add-deltas", fa.rspecifier)
        same_matrices(self, list(fa), "featpipe/delta.ark")

    def test_lda_and_fmllr(self):
        fa = kk.FeatureArchive("featpipe/feats.scp", utt2spk=utt2spk(),
                               cmvn_file_name="featpipe/cmvn.scp",
                               lda_mat_file_name="featpipe/final.mat", deltas=True)
        # lda: splices, not deltas; the product's order is OpenBLAS's with
        # the reference's thread count (featpipe/cases.txt)
        threads = os.environ["KALDI_GPU_DEV_FEATS_BLAS_THREADS"]
        same_matrices(self, list(fa), f"featpipe/lda{threads}.ark")
        if threads != "2":
            return
        fa = kk.FeatureArchive("featpipe/feats.scp", utt2spk=utt2spk(),
                               cmvn_file_name="featpipe/cmvn.scp",
                               lda_mat_file_name="featpipe/final.mat",
                               transform_file_name="featpipe/trans.ark")
        same_matrices(self, list(fa), "featpipe/sat.ark")
        key, m = list(fa)[1]
        np.testing.assert_array_equal(fa[key], m)

    def test_not_expressible(self):
        with self.assertRaises(NotImplementedError):
            kk.FeatureArchive("featpipe/feats.scp", vad_file_name="featpipe/cmvn.scp")
        self.assertIsNone(kk.feature_rspecifier(type("F", (), {"file_name": "x y.scp"})()))


class MfaCalls(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp())
        self.fsts = self.tmp / "fsts.1.ark"
        import gzip
        self.fsts.write_bytes(gzip.decompress(Path("graphs/mono.fsts.gz").read_bytes()))

    def test_align_function(self):
        aligner = kk.GmmAligner("models/mono/final.mdl", silence_phones=list(range(1, 11)),
                                **MFA_ALIGN)
        aligner.boost_silence(1.0)
        seen = []
        ali_path = self.tmp / "ali.1.ark"
        aligner.export_alignments(ali_path, kk.FstArchive(self.fsts),
                                  kk.FeatureArchive("feats/delta.ark"),
                                  reference_phone_archive=None,
                                  word_file_name=self.tmp / "words.1.ark",
                                  likelihood_file_name=self.tmp / "likelihoods.1.ark",
                                  callback=seen.append, utterance_parameters={})
        self.assertEqual(ali_path.read_bytes(), Path("kaldi/mono/ali.ark").read_bytes())
        words = dict(kaldi_ark.read_int32_vectors(self.tmp / "words.1.ark"))
        with open("kaldi/text.int", encoding="utf-8") as f:
            for line in f:
                k, *w = line.split()
                self.assertEqual(words[k].tolist(), [int(x) for x in w])
        likes = kk.AlignmentArchive(ali_path, words_file_name=self.tmp / "words.1.ark")
        self.assertEqual([a.utterance_id for a in likes], [k for k, _ in seen])
        self.assertEqual(len(seen), 40)
        self.assertTrue(all(isinstance(v, float) for _, v in seen))  # (utt, likelihood)
        per_frame = (self.tmp / "likelihoods.1.ark").read_bytes()
        self.assertEqual(per_frame.count(b"FV "), 40)

    def test_noisy_failures_callback(self):
        aligner = kk.GmmAligner("models/tri1/final.mdl", **MFA_ALIGN)
        fsts = self.tmp / "tri1.ark"
        import gzip
        fsts.write_bytes(gzip.decompress(Path("graphs/tri1.fsts.gz").read_bytes()))
        seen = []
        aligner.export_alignments(self.tmp / "noisy", kk.FstArchive(fsts),
                                  kk.FeatureArchive("noisy/delta.ark"), callback=seen.append)
        self.assertEqual(sum(v is None for _, v in seen), 39)  # (utt, None) per failure
        self.assertEqual((self.tmp / "noisy.ark").read_bytes(),
                         Path("noisy/tri1.ali.ark").read_bytes())

    def test_acc_stats_function(self):
        acc = kk.GmmStatsAccumulator("models/mono/final.mdl")
        counts = []
        acc.accumulate_stats(kk.FeatureArchive("feats/delta.ark"),
                             kk.AlignmentArchive("kaldi/mono/ali.ark"), callback=counts.append,
                             ignored_keys=None)
        self.assertEqual(counts, [40])  # kalpy: callback(100) each 100, then the rest
        self.assertEqual(acc.stats_bytes(), Path("kaldi/mono/final.acc").read_bytes())
        acc2 = kk.GmmStatsAccumulator("models/mono/final.mdl")
        first = next(iter(kk.AlignmentArchive("kaldi/mono/ali.ark"))).utterance_id
        counts = []
        acc2.accumulate_stats(kk.FeatureArchive("feats/delta.ark"),
                              kk.AlignmentArchive("kaldi/mono/ali.ark"), callback=counts.append,
                              ignored_keys={first})
        self.assertEqual(counts, [39])
        out = self.tmp / "x.acc"
        kk.GmmStatsAccumulator("models/tri2/final.mdl").export_stats(
            out, kk.FeatureArchive("feats/lda.ark"), kk.AlignmentArchive("kaldi/tri2/ali.ark"))
        self.assertEqual(out.read_bytes(), Path("kaldi/tri2/final.acc").read_bytes())
        try:
            import _kalpy  # noqa: F401
        except ImportError:
            with self.assertRaises(ImportError):
                acc.transition_accs  # kalpy objects need kalpy

    def test_align_utterance(self):
        aligner = kk.GmmAligner("models/mono/final.mdl", **MFA_ALIGN)
        feats = dict(kga.read_matrices("ark:feats/delta.ark"))
        ref = dict(kaldi_ark.read_int32_vectors("kaldi/mono/ali.ark"))
        for key, graph in list(kk.FstArchive(self.fsts))[:3]:
            a = aligner.align_utterance(graph, feats[key], key)
            self.assertEqual(a.alignment, ref[key].tolist())
            self.assertEqual(a.utterance_id, key)
            self.assertEqual(len(a.per_frame_likelihoods), len(a.alignment))
        # kalpy's rule: a retry beam not above the beam becomes 4 x beam
        self.assertEqual(kk.GmmAligner("models/mono/final.mdl", beam=50, retry_beam=40).retry_beam,
                         200)


class FeaturesOnAvx2Profile(unittest.TestCase):
    def test_features(self):
        for threads in ("1", "2"):
            env = dict(os.environ, KALDI_GPU_BLAS_PROFILE="hsw",
                       KALDI_GPU_DEV_FEATS_BLAS_THREADS=threads)
            p = subprocess.run([sys.executable, __file__, "--features"], env=env,
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)


def main():
    os.chdir(DATA)
    if "--features" in sys.argv:
        suite = unittest.defaultTestLoader.loadTestsFromTestCase(Features)
        return 0 if unittest.TextTestRunner(verbosity=2).run(suite).wasSuccessful() else 1
    suite = unittest.TestSuite(unittest.defaultTestLoader.loadTestsFromTestCase(c)
                               for c in (FeaturesOnAvx2Profile, MfaCalls))
    return 0 if unittest.TextTestRunner(verbosity=2).run(suite).wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
