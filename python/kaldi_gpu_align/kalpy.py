"""kalpy-compatible layer: GmmAligner and GmmStatsAccumulator with kalpy's
arguments and behaviour (kalpy-kaldi 0.10.5, kalpy.gmm.align and
kalpy.gmm.train), on this package's aligner and accumulator.

They take kalpy's archive objects (kalpy.decoder.data.FstArchive,
kalpy.feat.data.FeatureArchive, kalpy.gmm.data.AlignmentArchive) or this
module's stand-ins of the same names (for machines without kalpy). A
feature archive becomes the rspecifier of the recipes' feature pipeline
(apply-cmvn, add-deltas, splice-feats + transform-feats LDA, transform-feats
--utt2spk fMLLR), which the library computes in-process with the arithmetic
of Kaldi's programs (kalpy computes the same chain per utterance in Python).
What the pipeline cannot express (VAD frame selection, sliding CMVN,
subsampling, reference phones, per-utterance options) is done utterance by
utterance through the in-memory calls, with kalpy's own archive objects.

Differences from kalpy, all documented in docs/python.md: alignments come
as lists of ints (kalpy's type) and per-frame likelihoods as numpy float32
arrays (kalpy: FloatVector); words are the output labels of the best path
recovered from the alignment (kalpy: from the decoder's path; the same for
training graphs); transition_accs / gmm_accs are kalpy objects read from the
statistics bytes, so they need kalpy's _kalpy module.
"""
from __future__ import annotations

import atexit
import logging
import os
import shutil
import struct
import tempfile
import typing
from dataclasses import dataclass

import numpy as np

from . import Accumulator, Aligner, read_graphs, read_int32_vectors, read_matrices

align_logger = logging.getLogger("kalpy.align")
train_logger = logging.getLogger("kalpy.train")
USE_GPU = os.environ.get("KALDI_GPU_KALPY_USE_GPU", "optional")

# ---------------- specifiers (kalpy.utils) ----------------


def generate_read_specifier(file_name, sorted=True) -> str:  # noqa: A002 (kalpy's name)
    file_name = str(file_name)
    kind = "scp" if file_name.endswith(".scp") else "ark"
    return f"{kind},s,cs:{file_name}" if sorted else f"{kind}:{file_name}"


def generate_write_specifier(file_name, write_scp=False, text=False) -> str:
    file_name = str(file_name)
    if not file_name.endswith(".ark"):
        file_name += ".ark"
    prefix = "ark,t" if text else "ark"
    if write_scp:
        return f"{prefix},scp:{file_name},{file_name.replace('.ark', '.scp')}"
    return f"{prefix}:{file_name}"


_tmpdir = []


def _temp_file(name, lines):
    if not _tmpdir:
        _tmpdir.append(tempfile.mkdtemp(prefix="kga-kalpy-"))
        atexit.register(shutil.rmtree, _tmpdir[0], True)
    path = os.path.join(_tmpdir[0], f"{len(os.listdir(_tmpdir[0]))}-{name}")
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(lines)
    return path


def _utt2spk_file(mapping):
    return _temp_file("utt2spk", [f"{u} {mapping[u]}\n" for u in sorted(mapping)])


def feature_rspecifier(archive) -> typing.Optional[str]:
    """The rspecifier of the pipeline that computes what a kalpy
    FeatureArchive (or ours) yields, or None when the pipeline cannot."""
    g = lambda name, d=None: getattr(archive, name, d)  # noqa: E731
    if (g("use_sliding_cmvn") or g("vad_read_specifier") or g("vad_file_name")
            or g("subsample_n") or g("double")):
        return None
    if any(c.isspace() or c in "'\"\\`$;&<>(){}*?[]~#!|" for c in g("file_name", "")):
        return None
    base = generate_read_specifier(g("file_name"))
    utt2spk = g("utt2spk")
    stages = []
    cmvn = g("cmvn_read_specifier")
    if cmvn and utt2spk is not None:
        opts = ["--norm-vars=true"] if g("cmvn_norm_vars") else []
        if g("cmvn_reverse"):
            opts.append("--reverse=true")
        stages.append(["apply-cmvn", *opts, f"--utt2spk=ark:{_utt2spk_file(utt2spk)}", cmvn])
    if g("use_deltas"):
        stages.append(["add-deltas"])
    elif g("use_splices"):
        n = int(g("splice_frames", 3))
        stages.append(["splice-feats", f"--left-context={n}", f"--right-context={n}"])
        if g("lda_mat_file_name"):
            stages.append(["transform-feats", str(g("lda_mat_file_name"))])
    trans = g("transform_read_specifier")
    if trans:
        if utt2spk is None:
            return None  # kalpy applies no transform without speakers
        stages.append(["transform-feats", f"--utt2spk=ark:{_utt2spk_file(utt2spk)}", trans])
    if not stages:
        return base
    cmds = []
    for i, st in enumerate(stages):
        src = base if i == 0 else "ark:-"
        cmds.append(" ".join(st + [src, "ark:-"]))
    return "ark,s,cs:" + " | ".join(cmds) + " |"


def _read_specifier(archive):
    spec = getattr(archive, "read_specifier", None)
    if spec:
        return spec
    return generate_read_specifier(getattr(archive, "file_name"))


# ---------------- archives (stand-ins for kalpy's) ----------------


@dataclass
class Alignment:
    """kalpy.gmm.data.Alignment's fields."""

    utterance_id: str
    alignment: typing.List[int]
    words: typing.List[int]
    likelihood: float = None
    per_frame_likelihoods: typing.Any = None
    lattice: typing.Any = None

    @property
    def num_frames(self):
        return len(self.alignment)


class FstArchive:
    """kalpy.decoder.data.FstArchive's arguments: an archive or scp of
    training graphs, handed to the library as its read specifier;
    iteration (archives) yields (key, kaldi_gpu_align.Graph)."""

    def __init__(self, file_name):
        if not os.path.exists(file_name):
            raise OSError(f"Specified file does not exist: {file_name}")
        self.file_name = str(file_name)
        self.read_specifier = generate_read_specifier(file_name)

    def __iter__(self):
        if self.file_name.endswith(".scp"):
            raise NotImplementedError("iterating an scp of graphs: use kalpy's FstArchive")
        yield from read_graphs(self.file_name)

    def __getitem__(self, key):
        for k, g in self:
            if k == key:
                return g
        raise KeyError(f"No key {key} found in {self.file_name}")


class FeatureArchive:
    """kalpy.feat.data.FeatureArchive's arguments; the features are computed
    by the library's in-process pipeline (feature_rspecifier)."""

    def __init__(self, file_name, utt2spk=None, cmvn_file_name=None, lda_mat_file_name=None,
                 transform_file_name=None, vad_file_name=None, use_sliding_cmvn=False,
                 cmvn_norm_vars=False, cmvn_reverse=False, deltas=False, splices=False,
                 splice_frames=3, subsample_n=0, sliding_cmvn_window=300,
                 sliding_cmvn_center_window=True, double=False, callback=None):
        if not os.path.exists(file_name):
            raise OSError(f"Specified file does not exist: {file_name}")
        self.file_name = str(file_name)
        self.utt2spk = utt2spk
        self.cmvn_read_specifier = generate_read_specifier(cmvn_file_name) if cmvn_file_name else None
        self.cmvn_norm_vars, self.cmvn_reverse = cmvn_norm_vars, cmvn_reverse
        self.use_sliding_cmvn = use_sliding_cmvn
        self.use_deltas, self.use_splices, self.splice_frames = deltas, splices, splice_frames
        self.lda_mat_file_name = str(lda_mat_file_name) if lda_mat_file_name else None
        if self.lda_mat_file_name:
            self.use_splices, self.use_deltas = True, False
        self.transform_read_specifier = (generate_read_specifier(transform_file_name)
                                         if transform_file_name else None)
        self.vad_read_specifier = generate_read_specifier(vad_file_name) if vad_file_name else None
        self.subsample_n, self.double = subsample_n, double
        self.rspecifier = feature_rspecifier(self)
        if self.rspecifier is None:
            raise NotImplementedError("VAD, sliding CMVN, subsampling and double features need "
                                      "kalpy's own FeatureArchive")

    def __iter__(self):
        yield from read_matrices(self.rspecifier, log=align_logger)

    def __getitem__(self, key):
        for k, m in self:
            if k == key:
                return m
        raise KeyError(f"No key {key} found in {self.file_name}")


class AlignmentArchive:
    """kalpy.gmm.data.AlignmentArchive's arguments; iteration yields
    Alignment objects (words when words_file_name is given)."""

    def __init__(self, file_name, words_file_name=None, likelihood_file_name=None):
        if not os.path.exists(file_name):
            raise OSError(f"Specified file does not exist: {file_name}")
        self.file_name = str(file_name)
        self.read_specifier = generate_read_specifier(file_name)
        self.words_file_name = words_file_name
        self.likelihood_file_name = likelihood_file_name

    def __iter__(self):
        words = {}
        if self.words_file_name:
            words = dict(read_int32_vectors(generate_read_specifier(self.words_file_name)))
        for key, ali in read_int32_vectors(self.read_specifier):
            w = words.get(key)
            yield Alignment(key, ali.tolist(), w.tolist() if w is not None else None)

    def __getitem__(self, key):
        for a in self:
            if a.utterance_id == key:
                return a
        raise KeyError(f"No key {key} found in {self.file_name}")


# ---------------- writing Kaldi tables (words) ----------------

class _Int32VectorWriter:
    """Kaldi's binary archive of int32 vectors (Int32VectorWriter), with
    the scp of byte offsets for "ark,scp:"."""

    def __init__(self, wspecifier):
        kind, _, names = wspecifier.partition(":")
        files = names.split(",")
        self.ark = open(files[0], "wb")
        self.scp = open(files[1], "w", encoding="utf-8") if "scp" in kind.split(",") else None

    def write(self, key, values):
        v = np.asarray(values, dtype="<i4")
        self.ark.write(key.encode() + b" ")
        offset = self.ark.tell()
        self.ark.write(b"\0B\4" + struct.pack("<i", len(v)))
        rec = np.empty(len(v), dtype=[("size", "u1"), ("value", "<i4")])
        rec["size"], rec["value"] = 4, v
        self.ark.write(rec.tobytes())
        if self.scp:
            self.scp.write(f"{key} {self.ark.name}:{offset}\n")

    def close(self):
        self.ark.close()
        if self.scp:
            self.scp.close()


# ---------------- GmmAligner ----------------

def _as_list(a):
    return a.tolist() if a is not None else []


class GmmAligner:
    """kalpy.gmm.align.GmmAligner on the library's aligner (the GPU when
    one is usable: KALDI_GPU_KALPY_USE_GPU=no|yes|optional|wait)."""

    def __init__(self, acoustic_model_path, acoustic_scale=1.0, transition_scale=1.0,
                 self_loop_scale=1.0, beam=10, retry_beam=40, careful=False,
                 disambiguation_symbols=None, silence_phones=None):
        self.acoustic_model_path = str(acoustic_model_path)
        if not os.path.exists(self.acoustic_model_path):
            raise OSError(f"The specified model path {acoustic_model_path} does not exist.")
        self.acoustic_scale = acoustic_scale
        self.transition_scale = transition_scale
        self.self_loop_scale = self_loop_scale
        self.beam = beam
        self.retry_beam = retry_beam
        self.careful = careful
        self.silence_phones = silence_phones if silence_phones is not None else set()
        self.disambiguation_symbols = disambiguation_symbols or []
        self.num_done = self.num_error = self.num_retry = 0
        self.total_likelihood = self.total_frames = 0
        if self.beam >= self.retry_beam:
            self.retry_beam = 4 * self.beam
        self._boost = []  # boosts applied, for aligners made later
        self._aligners = {}

    def _kalpy_model(self):
        if getattr(self, "_model", None) is None:
            try:
                from kalpy.gmm.utils import read_gmm_model
            except ImportError as e:
                raise ImportError("transition_model / acoustic_model are kalpy objects and "
                                  "need kalpy") from e
            self._model = read_gmm_model(self.acoustic_model_path)
        return self._model

    @property
    def transition_model(self):
        """kalpy's TransitionModel of the model (read with kalpy)."""
        return self._kalpy_model()[0]

    @property
    def acoustic_model(self):
        """kalpy's AmDiagGmm of the model as read (without boosts)."""
        return self._kalpy_model()[1]

    def _aligner(self, beam=None, retry_beam=None, acoustic_scale=None, transition_scale=None,
                 self_loop_scale=None):
        """The library aligner for these options (kalpy: a falsy override
        means the default), made on first use."""
        p = (beam or self.beam, retry_beam or self.retry_beam,
             acoustic_scale or self.acoustic_scale, transition_scale or self.transition_scale,
             self_loop_scale or self.self_loop_scale)
        if p[1] <= p[0]:
            p = (p[0], p[0] * 4) + p[2:]
        al = self._aligners.get(p)
        if al is None:
            al = Aligner(self.acoustic_model_path, beam=p[0], retry_beam=p[1],
                         acoustic_scale=p[2], transition_scale=p[3], self_loop_scale=p[4],
                         careful=self.careful, use_gpu=USE_GPU, log=align_logger)
            for phones, factor, only in self._boost:
                al.boost_silence(phones, factor, only)
            self._aligners[p] = al
        return al

    def boost_silence(self, silence_weight, only_silence=True):
        phones = sorted(set(int(x) for x in self.silence_phones))
        self._boost.append((phones, float(silence_weight), only_silence))
        for al in self._aligners.values():
            al.boost_silence(phones, float(silence_weight), only_silence)

    def align_utterance(self, training_graph, features, utterance_id=None, reference_phones=None,
                        beam=None, retry_beam=None, boost_silence=None, acoustic_scale=None,
                        transition_scale=None, self_loop_scale=None):
        if reference_phones is not None:
            raise NotImplementedError("reference phones: use kalpy's GmmAligner")
        if boost_silence is not None:
            self.boost_silence(boost_silence)
        try:
            al = self._aligner(beam, retry_beam, acoustic_scale, transition_scale,
                               self_loop_scale)
            feats = features.numpy() if hasattr(features, "numpy") else np.asarray(features)
            r = al.align_batch([utterance_id], [training_graph], [feats], words=True,
                               per_frame=True)[0]
        finally:
            if boost_silence is not None:
                self.boost_silence(1 / boost_silence)
        if not r.ok:
            return None
        if r.retried and utterance_id:
            align_logger.debug(f"Retried {utterance_id}")
        return Alignment(utterance_id, _as_list(r.alignment), _as_list(r.words), r.likelihood,
                         r.per_frame)

    def _fast_path(self, training_graph_archive, feature_archive, reference_phone_archive,
                   utterance_parameters):
        """Both archives as rspecifiers, or None (the per-utterance path)."""
        if reference_phone_archive is not None or any(utterance_parameters.values()):
            return None
        feats = getattr(feature_archive, "rspecifier", None) or feature_rspecifier(feature_archive)
        graphs = _read_specifier(training_graph_archive)
        return (graphs, feats) if feats and graphs else None

    def _results(self, graphs, feats, **outputs):
        """kalpy's items from the library's archive call in kalpy's order."""
        for r in self._aligner().align_archive(graphs, feats, details=True, words=True,
                                               per_frame=True, order="features", **outputs):
            if r.status == "aligned":
                yield Alignment(r.key, _as_list(r.alignment), _as_list(r.words), r.likelihood,
                                r.per_frame)
            elif r.status == "failed":
                yield r.key, None

    def align_utterances(self, training_graph_archive, feature_archive,
                         reference_phone_archive=None, utterance_parameters=None):
        utterance_parameters = utterance_parameters or {}
        align_logger.debug(f"Aligning with {self.acoustic_model_path}")
        fast = self._fast_path(training_graph_archive, feature_archive, reference_phone_archive,
                               utterance_parameters)
        if fast:
            yield from self._results(*fast)
            return
        yield from self._slow_items(training_graph_archive, feature_archive,
                                    reference_phone_archive, utterance_parameters)

    def _slow_items(self, graphs, feats, refs, params):
        """kalpy's own loop over kalpy's archive objects, one utterance at a
        time through the in-memory call."""
        num_done = num_error = total_frames = 0
        total_likelihood = 0.0
        for utt, mat in feats:
            rows = mat.NumRows() if hasattr(mat, "NumRows") else len(mat)
            if rows == 0:
                align_logger.warning(f"Skipping {utt} due to zero-length features")
                continue
            try:
                graph = graphs[utt]
            except KeyError:
                align_logger.warning(f"Skipping {utt} due to missing training graph")
                continue
            ref = refs.Value(utt) if refs is not None and refs.HasKey(utt) else None
            a = self.align_utterance(graph, mat, utt, ref, **params.get(utt, {}))
            if a is None:
                num_error += 1
                yield utt, None
                continue
            num_done += 1
            total_likelihood += a.likelihood
            total_frames += len(a.alignment)
            yield a
        if total_frames:
            align_logger.info(f"Overall log-likelihood per frame is "
                              f"{total_likelihood / total_frames} over {total_frames} frames.")
        align_logger.info(f"Done {num_done}, errors on {num_error}")

    def export_alignments(self, file_name, training_graph_archive, feature_archive,
                          reference_phone_archive=None, word_file_name=None,
                          likelihood_file_name=None, write_scp=False, callback=None,
                          utterance_parameters=None):
        utterance_parameters = utterance_parameters or {}
        ali_ws = generate_write_specifier(file_name, write_scp)
        like_ws = (generate_write_specifier(likelihood_file_name, write_scp)
                   if likelihood_file_name else None)
        words = (_Int32VectorWriter(generate_write_specifier(word_file_name, write_scp))
                 if word_file_name else None)
        fast = self._fast_path(training_graph_archive, feature_archive, reference_phone_archive,
                               utterance_parameters)
        try:
            if fast:
                items = self._results(*fast, alignments_wspecifier=ali_ws,
                                      per_frame_wspecifier=like_ws)
                for item in items:
                    if isinstance(item, tuple):
                        if callback:
                            callback(item)
                        continue
                    if callback:
                        callback((item.utterance_id, item.likelihood))
                    if words:
                        words.write(item.utterance_id, item.words)
                return
            self._export_slow(ali_ws, like_ws, words, callback, training_graph_archive,
                              feature_archive, reference_phone_archive, utterance_parameters)
        except Exception as e:
            align_logger.error(e)
            raise
        finally:
            if words:
                words.close()

    def _export_slow(self, ali_ws, like_ws, words, callback, graphs, feats, refs, params):
        from _kalpy.util import BaseFloatVectorWriter, Int32VectorWriter  # kalpy's objects came
        writer = Int32VectorWriter(ali_ws)
        likes = BaseFloatVectorWriter(like_ws) if like_ws else None
        try:
            for a in self._slow_items(graphs, feats, refs, params):
                if isinstance(a, tuple):
                    if callback:
                        callback(a)
                    continue
                if callback:
                    callback((a.utterance_id, a.likelihood))
                writer.Write(str(a.utterance_id), a.alignment)
                if words:
                    words.write(a.utterance_id, a.words)
                if likes is not None:
                    from _kalpy.matrix import FloatVector
                    likes.Write(str(a.utterance_id), FloatVector(a.per_frame_likelihoods))
        finally:
            writer.Close()
            if likes is not None:
                likes.Close()


# ---------------- GmmStatsAccumulator ----------------

class GmmStatsAccumulator:
    """kalpy.gmm.train.GmmStatsAccumulator on the library's accumulator."""

    def __init__(self, acoustic_model_path):
        self.acoustic_model_path = str(acoustic_model_path)
        if not os.path.exists(self.acoustic_model_path):
            raise OSError(f"The specified model path {acoustic_model_path} does not exist.")
        self._acc = Accumulator(self.acoustic_model_path, use_gpu=USE_GPU, log=train_logger)
        self.callback_frequency = 100

    def stats_bytes(self, binary=True):
        """gmm-acc-stats-ali's file, as bytes."""
        return self._acc.stats_bytes(binary)

    def _kalpy_objects(self):
        """(transition_accs, gmm_accs) as kalpy's DoubleVector and
        AccumAmDiagGmm, read from the statistics bytes."""
        try:
            from _kalpy.gmm import AccumAmDiagGmm
            from _kalpy.matrix import DoubleVector
            from _kalpy.util import Input
        except ImportError as e:
            raise ImportError("transition_accs / gmm_accs are kalpy objects and need kalpy's "
                              "_kalpy module; stats_bytes() gives the statistics without it"
                              ) from e
        path = _temp_file("stats.acc", [])
        with open(path, "wb") as f:
            f.write(self.stats_bytes(True))
        ki = Input()
        ki.Open(path, True)
        tacc, gacc = DoubleVector(), AccumAmDiagGmm()
        tacc.Read(ki.Stream(), True)
        gacc.Read(ki.Stream(), True)
        ki.Close()
        os.remove(path)
        return tacc, gacc

    @property
    def transition_accs(self):
        return self._kalpy_objects()[0]

    @property
    def gmm_accs(self):
        return self._kalpy_objects()[1]

    def accumulate_stats(self, feature_archive, alignment_archive, callback=None,
                         ignored_keys=None):
        feats = getattr(feature_archive, "rspecifier", None) or feature_rspecifier(feature_archive)
        before = self._acc.counts["done"]
        if feats and not ignored_keys:
            reported = [0]

            def progress(done, errors, frames):  # kalpy's callback(100) rhythm
                if callback:
                    while done - reported[0] >= self.callback_frequency:
                        callback(self.callback_frequency)
                        reported[0] += self.callback_frequency

            c = self._acc.accumulate_archive(feats, _read_specifier(alignment_archive),
                                             progress=progress)
            rest = c["done"] - reported[0]
        else:
            rest = self._accumulate_slow(feature_archive, alignment_archive, callback,
                                         set(ignored_keys or ()))
        if callback is not None and rest:
            callback(rest)
        done = self._acc.counts["done"] - before
        train_logger.info(f"Done {done} files.")

    def _accumulate_slow(self, feats, alis, callback, ignored):
        """kalpy's loop over kalpy's objects, a batch of utterances at a time."""
        keys, mats, seqs, done = [], [], [], 0

        def flush():
            if keys:
                self._acc.accumulate_batch(keys, mats, seqs)
                keys.clear(), mats.clear(), seqs.clear()

        for utt, mat in feats:
            if utt in ignored:
                train_logger.warning(f"Ignoring {utt}")
                continue
            m = mat.numpy() if hasattr(mat, "numpy") else np.asarray(mat)
            if m.shape[0] == 0:
                train_logger.warning(f"Skipping {utt} due to zero-length features")
                continue
            try:
                a = alis[utt]
            except KeyError:
                train_logger.warning(f"Skipping {utt} due to missing alignment")
                continue
            keys.append(utt), mats.append(m), seqs.append(np.asarray(a.alignment, np.int32))
            done += 1
            if done % self.callback_frequency == 0:
                flush()
                if callback:
                    callback(self.callback_frequency)
        flush()
        return done % self.callback_frequency

    def export_stats(self, file_name, feature_archive, alignment_archive):
        self.accumulate_stats(feature_archive, alignment_archive)
        self._acc.write(str(file_name), binary=True)  # logs "Written accs."

