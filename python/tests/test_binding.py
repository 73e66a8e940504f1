#!/usr/bin/env python3
"""kaldi_gpu_align (the ctypes binding) against Kaldi's fixtures (tests/data):
alignments identical to gmm-align-compiled's (archive and in-memory calls,
any order of utterances, words = the transcripts), statistics bytes identical
to gmm-acc-stats-ali's, Kaldi errors as exceptions with the ERROR line's
message, log lines to logging or a callable, progress callbacks (stopping,
raising), the GIL released while the library works.

Usage: test_binding.py [--gpu]   (--gpu: the same on the GPU, compared with
the CPU path; SKIP without a GPU unless KIO_REQUIRE_GPU=1).
Exits 77 after "SKIP: why" when numpy or the library is missing.
"""
from __future__ import annotations

import logging
import os
import sys
import tempfile
import threading
import time
import unittest
from pathlib import Path

from testenv import DATA, require

np, kga = require()
import kaldi_ark  # noqa: E402

GPU = "--gpu" in sys.argv
MONO, TRI2 = "models/mono/final.mdl", "models/tri2/final.mdl"
MONO_G = "ark:gunzip -c graphs/mono.fsts.gz|"
OPTS = dict(beam=10, retry_beam=40, transition_scale=1.0, acoustic_scale=0.1,
            self_loop_scale=0.1)
USE = "yes" if GPU else "no"


def kaldi_alis(path):
    return dict(kaldi_ark.read_int32_vectors(path))


def transcripts():
    out = {}
    with open("kaldi/text.int", encoding="utf-8") as f:
        for line in f:
            k, *w = line.split()
            out[k] = np.array([int(x) for x in w], np.int32)
    return out


class Lines:
    """A log callable that keeps (level, kaldi line, message)."""

    def __init__(self):
        self.lines = []

    def __call__(self, level, text, msg):
        self.lines.append((level, text, msg))

    def errors(self):
        return [m for lv, _, m in self.lines if lv == -2]


class Align(unittest.TestCase):
    def test_archive_is_kaldis(self):
        ref = kaldi_alis("kaldi/mono/ali.ark")
        al = kga.Aligner(MONO, use_gpu=USE, **OPTS)
        tmp = tempfile.mkdtemp()
        ws = f"ark:{tmp}/ali.ark"
        got = list(al.align_archive(MONO_G, "ark:feats/delta.ark", alignments_wspecifier=ws))
        self.assertEqual([k for k, _ in got], list(ref))  # Kaldi's order
        for key, ali in got:
            self.assertEqual(ali.dtype, np.int32)
            np.testing.assert_array_equal(ali, ref[key])
        self.assertEqual(Path(f"{tmp}/ali.ark").read_bytes(),
                         Path("kaldi/mono/ali.ark").read_bytes())
        self.assertEqual(al.is_gpu, GPU)
        al.close()

    def test_details_words_scores(self):
        scores = kaldi_ark.read_float_table("kaldi/tri1/scores.txt")
        ref, words = kaldi_alis("kaldi/tri1/ali.ark"), transcripts()
        with kga.Aligner("models/tri1/final.mdl", use_gpu=USE, **OPTS) as al:
            res = list(al.align_archive("ark:gunzip -c graphs/tri1.fsts.gz|", "ark:feats/delta.ark",
                                        details=True, words=True, per_frame=True))
        self.assertEqual(len(res), 40)
        for r in res:
            self.assertEqual(r.status, "aligned")
            np.testing.assert_array_equal(r.alignment, ref[r.key])
            np.testing.assert_array_equal(r.words, words[r.key])
            self.assertEqual(r.per_frame.shape, (r.num_frames,))
            self.assertEqual(kaldi_ark.kaldi_float_text(np.float32(r.score)), scores[r.key])
            self.assertAlmostEqual(r.likelihood * 0.1, r.score, delta=1e-6 * abs(r.score))

    def test_noisy_failures(self):
        # noisy/tri1.align.log: 40 retried, 39 "Did not successfully decode"
        with kga.Aligner("models/tri1/final.mdl", use_gpu=USE, **OPTS) as al:
            res = list(al.align_archive("ark:gunzip -c graphs/tri1.fsts.gz|", "ark:noisy/delta.ark",
                                        details=True))
            plain = list(al.align_archive("ark:gunzip -c graphs/tri1.fsts.gz|",
                                          "ark:noisy/delta.ark"))
        self.assertEqual(sum(r.retried for r in res), 40)
        self.assertEqual(sum(r.status == "failed" for r in res), 39)
        self.assertTrue(all(r.alignment is None for r in res if r.status == "failed"))
        ref = kaldi_alis("noisy/tri1.ali.ark")
        self.assertEqual([k for k, _ in plain], list(ref))  # failures are not yielded

    def test_batch_any_order(self):
        graphs = dict(kga.read_graphs("graphs/mono.fsts.gz"))
        feats = dict(kga.read_matrices("ark:feats/delta.ark"))
        ref, words = kaldi_alis("kaldi/mono/ali.ark"), transcripts()
        keys = sorted(graphs, key=lambda k: (hash(k) % 7, k))  # speakers mixed
        with kga.Aligner(MONO, use_gpu=USE, batch_size=9, **OPTS) as al:
            res = al.align_batch(keys, [graphs[k] for k in keys], [feats[k] for k in keys],
                                 words=True)
        self.assertEqual([r.key for r in res], keys)
        for r in res:
            np.testing.assert_array_equal(r.alignment, ref[r.key])
            np.testing.assert_array_equal(r.words, words[r.key])

    def test_graph_from_arrays(self):
        # a two-state acceptor of transition-id 3: one frame aligns to [3]
        g = kga.Graph.from_arrays(2, 0, [np.inf, 0.0], [0, 1, 1], [3], [7], [0.5], [1])
        self.assertEqual((g.num_states, g.num_arcs), (2, 1))
        feats = dict(kga.read_matrices("ark:feats/delta.ark"))
        x = next(iter(feats.values()))[:1]
        with kga.Aligner(MONO, use_gpu=USE, **OPTS) as al:
            r = al.align_batch(["one"], [g], [x], words=True)[0]
        self.assertEqual(r.status, "aligned")
        np.testing.assert_array_equal(r.alignment, [3])
        np.testing.assert_array_equal(r.words, [7])
        with self.assertRaises(ValueError):
            kga.Graph.from_arrays(2, 0, [0.0], [0, 1, 1], [3], [7], [0.5], [1])

    def test_features_order(self):
        # kalpy's order: features in order, zero-length and graph-less skipped
        lines = Lines()
        with kga.Aligner(MONO, use_gpu=USE, log=lines, **OPTS) as al:
            res = list(al.align_archive("ark:gunzip -c edge/mono.fsts.gz|", "ark:edge/feats.ark",
                                        details=True, order="features"))
        feats = kga.read_matrices("ark:edge/feats.ark")
        self.assertEqual([r.key for r in res], [k for k, m in feats if m.shape[0] > 0])
        self.assertTrue(any("zero-length features" in m for _, _, m in lines.lines))

    def test_boost_silence(self):
        feats = dict(kga.read_matrices("ark:feats/delta.ark"))
        graphs = kga.read_graphs("graphs/mono.fsts.gz")[:5]
        with kga.Aligner(MONO, use_gpu=USE, **OPTS) as al:
            a = al.align_batch(None, [g for _, g in graphs], [feats[k] for k, _ in graphs])
            al.boost_silence(list(range(1, 11)), 1.0)  # gconsts as read: nothing changes
            b = al.align_batch(None, [g for _, g in graphs], [feats[k] for k, _ in graphs])
            al.boost_silence(list(range(1, 11)), 2.0)
            c = al.align_batch(None, [g for _, g in graphs], [feats[k] for k, _ in graphs])
            with self.assertRaises(ValueError):
                al.boost_silence([3, 1], 2.0)
        self.assertEqual([x.likelihood for x in a], [x.likelihood for x in b])
        self.assertNotEqual([x.likelihood for x in a], [x.likelihood for x in c])


class Accumulate(unittest.TestCase):
    def test_archive_bytes(self):
        with kga.Accumulator(MONO, use_gpu=USE) as acc:
            c = acc.accumulate_archive("ark:feats/delta.ark", "ark:kaldi/mono/ali.ark")
            self.assertEqual((c["done"], c["errors"], c["frames"]), (40, 0, 14158))
            data = acc.stats_bytes()
            tmp = tempfile.mkdtemp()
            acc.write(f"{tmp}/x.acc")
            self.assertEqual(Path(f"{tmp}/x.acc").read_bytes(), data)
            acc.write(f"{tmp}/x.txt.acc", binary=False)
            text = Path(f"{tmp}/x.txt.acc").read_bytes()
        if GPU:  # the device sums in another order: compare with the CPU's
            with kga.Accumulator(MONO, use_gpu="no") as cpu:
                cpu.accumulate_archive("ark:feats/delta.ark", "ark:kaldi/mono/ali.ark")
                self.assertAlmostEqual(cpu.counts["total_like"], c["total_like"],
                                       delta=1e-6 * abs(c["total_like"]))
            return
        self.assertEqual(data, Path("kaldi/mono/final.acc").read_bytes())
        self.assertEqual(text, Path("kaldi/mono/final.txt.acc").read_bytes())

    def test_batch_bytes(self):
        feats = kga.read_matrices("ark:feats/lda.ark")
        alis = kaldi_alis("kaldi/tri2/ali.ark")
        with kga.Accumulator(TRI2, use_gpu=USE) as acc:
            likes = acc.accumulate_batch([k for k, _ in feats], [m for _, m in feats],
                                         [alis[k] for k, _ in feats])
            self.assertEqual(likes.shape, (40,))
            self.assertTrue(np.all(likes < 0))
            if not GPU:
                self.assertEqual(acc.stats_bytes(), Path("kaldi/tri2/final.acc").read_bytes())
            acc.reset()
            self.assertEqual(acc.counts["done"], 0)

    def test_fused(self):
        with kga.AlignAccumulator(MONO, use_gpu=USE, **OPTS) as f:
            got = list(f.align_archive(MONO_G, "ark:feats/delta.ark"))
            self.assertEqual(len(got), 40)
            if not GPU:
                self.assertEqual(f.stats_bytes(), Path("kaldi/mono/final.acc").read_bytes())


class Errors(unittest.TestCase):
    def test_kaldi_error_message(self):
        lines = Lines()
        with self.assertRaises(kga.KaldiError) as cm:
            kga.Aligner("models/none.mdl", log=lines)
        self.assertEqual(str(cm.exception), lines.errors()[0])  # the ERROR line's message
        self.assertIn("models/none.mdl", str(cm.exception))
        # a fatal error in the middle: mono model, 40-dim features
        tmp = tempfile.mkdtemp()
        lines = Lines()
        with kga.Aligner(MONO, use_gpu=USE, log=lines, **OPTS) as al:
            with self.assertRaises(kga.KaldiError) as cm:
                list(al.align_archive(MONO_G, "ark:feats/lda.ark",
                                      alignments_wspecifier=f"ark:{tmp}/a.ark"))
            self.assertEqual(str(cm.exception), lines.errors()[0])
            self.assertEqual(lines.lines[-1][0], -2)  # nothing after the ERROR line
            self.assertFalse(os.path.exists(f"{tmp}/a.ark"))  # abandoned, as Kaldi's
            self.assertEqual(len(list(al.align_archive(MONO_G, "ark:feats/delta.ark"))), 40)
        with self.assertRaises(kga.KaldiError):
            kga.Accumulator(MONO).accumulate_archive("ark:feats/lda.ark", "ark:kaldi/mono/ali.ark")
        with self.assertRaises(ValueError):
            kga.Aligner(MONO, use_gpu="sometimes")
        with self.assertRaises(ValueError):
            kga.Aligner(MONO).align_archive(MONO_G, "ark:feats/delta.ark", order="random")

    def test_logging(self):
        logger = logging.getLogger("kga-test")
        seen = []

        class H(logging.Handler):
            def emit(self, record):
                seen.append((record.levelno, record.getMessage(), record.kaldi_line))

        logger.addHandler(H())
        logger.setLevel(logging.DEBUG)
        with kga.Aligner("models/tri1/final.mdl", use_gpu=USE, log=logger, **OPTS) as al:
            list(al.align_archive("ark:gunzip -c graphs/tri1.fsts.gz|", "ark:noisy/delta.ark"))
        msgs = [m for _, m, _ in seen]
        self.assertIn("Done 1, errors on 39", msgs)
        warn = [x for x in seen if x[0] == logging.WARNING]
        self.assertEqual(len(warn), 40 + 39)  # retries and failures
        self.assertTrue(warn[0][2].startswith("WARNING ("))


class Callbacks(unittest.TestCase):
    def test_progress(self):
        calls = []
        with kga.Aligner(MONO, use_gpu=USE, batch_size=8, **OPTS) as al:
            n = len(list(al.align_archive(MONO_G, "ark:feats/delta.ark",
                                          progress=lambda d, e, f: calls.append((d, e, f)))))
            self.assertEqual(n, 40)
            self.assertGreaterEqual(len(calls), 5)
            self.assertEqual(calls[-1][:2], (40, 0))
            self.assertEqual(calls, sorted(calls))
            # a true return stops the work
            with self.assertRaises(kga.Cancelled):
                list(al.align_archive(MONO_G, "ark:feats/delta.ark", progress=lambda *a: True))

            def boom(*a):
                raise KeyError("from the callback")

            with self.assertRaises(KeyError):  # the callback's own exception
                list(al.align_archive(MONO_G, "ark:feats/delta.ark", progress=boom))
            with self.assertRaises(KeyError):
                kga.Accumulator(MONO).accumulate_archive("ark:feats/delta.ark",
                                                         "ark:kaldi/mono/ali.ark", progress=boom)

    def test_leave_early(self):
        tmp = tempfile.mkdtemp()
        with kga.Aligner(MONO, use_gpu=USE, batch_size=4, **OPTS) as al:
            it = al.align_archive(MONO_G, "ark:feats/delta.ark",
                                  alignments_wspecifier=f"ark:{tmp}/cut.ark")
            first = [next(it) for _ in range(3)]
            it.close()  # the library stops; its output is abandoned
            self.assertEqual(len(first), 3)
            self.assertFalse(os.path.exists(f"{tmp}/cut.ark"))
            self.assertEqual(len(list(al.align_archive(MONO_G, "ark:feats/delta.ark"))), 40)

    def test_calls_inside_a_loop(self):
        graphs = dict(kga.read_graphs("graphs/mono.fsts.gz"))
        feats = dict(kga.read_matrices("ark:feats/delta.ark"))
        ref = kaldi_alis("kaldi/mono/ali.ark")
        lines = Lines()
        # batches of 2: more than the queue holds, so the loop starts with the
        # call still running
        with kga.Aligner(MONO, use_gpu=USE, log=lines, batch_size=2, **OPTS) as al, \
                kga.Aligner(MONO, use_gpu=USE, **OPTS) as al2, \
                kga.Accumulator(MONO, use_gpu=USE) as acc:
            n = 0
            for key, ali in al.align_archive(MONO_G, "ark:feats/delta.ark"):
                if n == 0:  # the handle is busy with the loop
                    with self.assertRaises(ValueError):
                        al.align_batch([key], [graphs[key]], [feats[key]])
                # in-memory calls of other handles inside the loop
                r = al2.align_batch([key], [graphs[key]], [feats[key]])[0]
                np.testing.assert_array_equal(r.alignment, ref[key])
                acc.accumulate_batch([key], [feats[key]], [ali])
                n += 1
                if n == 2:
                    with self.assertRaises(RuntimeError):  # another archive call: refused
                        acc.accumulate_archive("ark:feats/delta.ark", "ark:kaldi/mono/ali.ark")
            self.assertEqual(n, 40)
            if not GPU:
                self.assertEqual(acc.stats_bytes(), Path("kaldi/mono/final.acc").read_bytes())
            # the archive call's lines are Kaldi's, none of the in-memory calls' in between
            self.assertEqual(sum(m.startswith("en-029") for _, _, m in lines.lines), 40)

    def test_gil_released(self):
        """A Python thread keeps running while the library aligns."""
        ticks, stop = [0], threading.Event()

        def spin():
            while not stop.is_set():
                ticks[0] += 1
                time.sleep(0.001)

        graphs = dict(kga.read_graphs("graphs/tri1.fsts.gz"))
        feats = dict(kga.read_matrices("ark:feats/delta.ark"))
        keys = list(graphs) * 3
        with kga.Aligner("models/tri1/final.mdl", use_gpu=USE, **OPTS) as al:
            t = threading.Thread(target=spin)
            t.start()
            t0 = time.time()
            before = ticks[0]
            al.align_batch(keys, [graphs[k] for k in keys], [feats[k] for k in keys])
            during, took = ticks[0] - before, time.time() - t0
            stop.set()
            t.join()
        # with the GIL held the thread would not tick at all during the call
        self.assertGreater(during, 0.2 * took / 0.001 * 0.1, f"{during} ticks in {took:.2f} s")


def main():
    os.chdir(DATA)
    if GPU:
        try:
            key, g = kga.read_graphs("graphs/mono.fsts.gz")[0]
            f = dict(kga.read_matrices("ark:feats/delta.ark"))[key]
            kga.Aligner(MONO, use_gpu="yes").align_batch([key], [g], [f])
            probe = kga.Accumulator(MONO, use_gpu="yes")
            probe.accumulate_batch(["p"], [np.zeros((1, 39), np.float32)], [[1]])
        except kga.KaldiError as e:
            if os.environ.get("KIO_REQUIRE_GPU") == "1":
                print(f"FAIL: no usable GPU: {e}")
                return 1
            print(f"SKIP: no usable GPU: {e}")
            return 77
    argv = [sys.argv[0]] + [a for a in sys.argv[1:] if a != "--gpu"]
    prog = unittest.main(argv=argv, exit=False, verbosity=2)
    return 0 if prog.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
