"""Kaldi's GMM alignment and statistics accumulation on the GPU (or the CPU).

    import kaldi_gpu_align as kga
    aligner = kga.Aligner("final.mdl")
    for key, ali in aligner.align_archive("ark:gunzip -c fsts.1.gz|", "scp:feats.scp"):
        ...

The results are Kaldi's (gmm-align-compiled's alignments, gmm-acc-stats-ali's
statistics bytes). Work runs in the C library with the GIL released; Kaldi's
log lines go to the "kaldi_gpu_align" logger (or the `log` argument); a
Kaldi error raises KaldiError with the ERROR line's message. docs/python.md
has the details. kaldi_gpu_align.kalpy is a drop-in for kalpy's GmmAligner
and GmmStatsAccumulator; python -m kaldi_gpu_align.mfa runs MFA with them.
"""
from __future__ import annotations

import ctypes
import gzip
import queue
import struct
import threading
from ctypes import POINTER, byref, c_float, c_int32, c_size_t, c_void_p, cast

import numpy as np

from . import _lib
from ._lib import Cancelled, KaldiError, lib

__all__ = ["Aligner", "Accumulator", "AlignAccumulator", "AlignResult", "Graph", "KaldiError",
           "Cancelled", "read_graphs", "read_matrices", "read_int32_vectors", "set_verbose",
           "version"]


def version():
    """The library's version and the Kaldi it reproduces."""
    return lib.kga_version().decode()


def set_verbose(level):
    """Kaldi's --verbose for the whole process (VLOG lines up to level)."""
    lib.kga_set_verbose(int(level))


def _gpu_mode(use_gpu):
    if isinstance(use_gpu, bool):
        use_gpu = "yes" if use_gpu else "no"
    if use_gpu not in _lib.GPU_MODES:
        raise ValueError(f"use_gpu={use_gpu!r}: one of no, yes, optional, wait")
    return _lib.GPU_MODES[use_gpu]


class _Callbacks:
    """Python callbacks of one C call: exceptions they raise stop the call
    and are raised again once it returns."""

    def __init__(self):
        self.pending = []

    def guard(self, fn):
        def wrapped(*args):
            if self.pending:
                return 1
            try:
                return 1 if fn(*args) else 0
            except BaseException as e:  # re-raised by _lib.check after the call
                self.pending.append(e)
                return 1
        return wrapped


def _progress_cb(cbs, progress):
    if progress is None:
        return _lib.PROGRESS_FN()
    return _lib.PROGRESS_FN(cbs.guard(lambda u, d, e, f: progress(d, e, f)))


# ---------------- graphs and results ----------------

class Graph:
    """A decoding graph in the library's memory (immutable)."""

    def __init__(self, handle):
        self._h = c_void_p(handle)

    @classmethod
    def from_openfst(cls, data):
        """From OpenFst's binary bytes (a Kaldi FST archive entry,
        pywrapfst's / kalpy's VectorFst.write_to_string())."""
        data = bytes(data)
        h = c_void_p()
        _lib.check(lib.kga_graph_from_openfst(byref(h), data, len(data)))
        return cls(h.value)

    @classmethod
    def from_arrays(cls, num_states, start, final, arc_start, ilabel, olabel, weight, nextstate):
        """From CSR arrays: arcs of state s are arc_start[s]..arc_start[s+1]-1;
        final[s] = +inf for a state that is not final."""
        f32 = lambda a: np.ascontiguousarray(a, dtype=np.float32)  # noqa: E731
        i32 = lambda a: np.ascontiguousarray(a, dtype=np.int32)  # noqa: E731
        arrs = [f32(final), i32(arc_start), i32(ilabel), i32(olabel), f32(weight), i32(nextstate)]
        if len(arrs[1]) != num_states + 1 or len(arrs[0]) != num_states:
            raise ValueError("final needs num_states values, arc_start num_states + 1")
        n = int(arrs[1][-1]) if num_states else 0
        if any(len(a) < n for a in arrs[2:]):
            raise ValueError("every arc array needs arc_start[num_states] values")
        h = c_void_p()
        _lib.check(lib.kga_graph_from_arrays(byref(h), num_states, start,
                                             *[a.ctypes.data for a in arrs]))
        return cls(h.value)

    @property
    def num_states(self):
        return lib.kga_graph_num_states(self._h)

    @property
    def num_arcs(self):
        return lib.kga_graph_num_arcs(self._h)

    def __del__(self):
        if getattr(self, "_h", None) and self._h.value:
            lib.kga_graph_free(self._h)
            self._h = None


def _as_graph(g):
    if isinstance(g, Graph):
        return g
    if isinstance(g, (bytes, bytearray, memoryview)):
        return Graph.from_openfst(g)
    if hasattr(g, "write_to_string"):  # pywrapfst / kalpy VectorFst
        return Graph.from_openfst(g.write_to_string())
    raise TypeError(f"a graph: Graph, OpenFst bytes or an Fst with write_to_string(), not "
                    f"{type(g).__name__}")


class AlignResult:
    """One utterance: status "aligned", "failed" (Kaldi's "Did not
    successfully decode"), "empty_graph" or "no_frames"; alignment
    (numpy int32 transition-ids, None unless aligned); likelihood
    (-(graph+acoustic cost)/acoustic_scale, kalpy's); score (-(graph +
    acoustic cost): gmm-align-compiled's scores table); retried; words and
    per_frame when asked for."""

    __slots__ = ("key", "status", "alignment", "likelihood", "score", "retried", "num_frames",
                 "words", "per_frame")

    def __init__(self, r, words, per_frame):
        self.key = r.key.decode("utf-8", "replace") if r.key else None
        self.status = _lib.UTT_STATUS[r.status]
        self.num_frames = r.num_frames
        self.retried = bool(r.retried)
        self.likelihood = float(r.like)
        self.score = float(r.score)
        n = r.num_frames
        self.alignment = np.ctypeslib.as_array(r.ali, (n,)).copy() if r.ali else None
        self.per_frame = (np.ctypeslib.as_array(r.per_frame, (n,)).copy()
                          if per_frame and r.per_frame else None)
        self.words = None
        if words and self.status == "aligned":
            self.words = (np.ctypeslib.as_array(r.words, (r.num_words,)).copy()
                          if r.num_words else np.zeros(0, np.int32))

    @property
    def ok(self):
        return self.status == "aligned"

    def __repr__(self):
        return (f"AlignResult({self.key!r}, {self.status}, frames={self.num_frames}, "
                f"likelihood={self.likelihood:g})")


# ---------------- the aligner ----------------

class _Handle:
    """A C handle with its log sink; close() or garbage collection frees."""

    _free = None

    def _set_log(self, log):
        self._sink = _lib.register_sink(log)

    def close(self):
        h = getattr(self, "_h", None)
        if h and h.value:
            type(self)._free(h)
            self._h = None
        if getattr(self, "_sink", None):
            _lib.unregister_sink(self._sink)
            self._sink = None

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _aligner_opts(beam, retry_beam, transition_scale, acoustic_scale, self_loop_scale, careful,
                  use_gpu, batch_size, num_gpus, sink):
    o = _lib.AlignerOpts()
    lib.kga_aligner_opts_init(byref(o))
    o.beam, o.retry_beam = beam, retry_beam
    o.transition_scale, o.acoustic_scale, o.self_loop_scale = (transition_scale, acoustic_scale,
                                                              self_loop_scale)
    o.careful = bool(careful)
    o.use_gpu = _gpu_mode(use_gpu)
    o.batch_size, o.num_gpus = batch_size, num_gpus
    o.log, o.log_user = _lib.LOG_CALLBACK, sink
    return o


class Aligner(_Handle):
    """gmm-align-compiled with a model: archives (align_archive) and
    utterances in memory (align_batch). The defaults are the recipes'
    (steps/align_si.sh, MFA). use_gpu: "optional" (a GPU if one is usable,
    else the CPU), "yes", "no", "wait". log: a logging.Logger (default
    "kaldi_gpu_align") or a callable(level, kaldi_line, message)."""

    _free = lib.kga_aligner_free

    def __init__(self, model_path, *, beam=10, retry_beam=40, transition_scale=1.0,
                 acoustic_scale=0.1, self_loop_scale=0.1, careful=False, use_gpu="optional",
                 batch_size=8192, num_gpus=1, log=None):
        self._h = None
        self._set_log(log)
        self.model_path = str(model_path)
        self._opts = _aligner_opts(beam, retry_beam, transition_scale, acoustic_scale,
                                   self_loop_scale, careful, use_gpu, batch_size, num_gpus,
                                   self._sink)
        h = c_void_p()
        _lib.check(lib.kga_aligner_new(byref(h), _lib.enc(model_path), byref(self._opts)))
        self._h = h

    @property
    def is_gpu(self):
        """True once the backend (chosen at the first alignment) is a GPU."""
        return bool(lib.kga_aligner_is_gpu(self._h))

    @property
    def dim(self):
        return lib.kga_aligner_dim(self._h)

    @property
    def num_pdfs(self):
        return lib.kga_aligner_num_pdfs(self._h)

    @property
    def num_transition_ids(self):
        return lib.kga_aligner_num_transition_ids(self._h)

    def boost_silence(self, phones, factor, only_silence=True):
        """Scales the silence GMMs' weights (kalpy's boost_silence); phones
        sorted and unique."""
        p = np.ascontiguousarray(phones, dtype=np.int32)
        _lib.check(lib.kga_aligner_boost_silence(self._h, p.ctypes.data_as(POINTER(c_int32)),
                                                 len(p), float(factor), bool(only_silence)))

    def align_archive(self, graphs_rspecifier, feats_rspecifier, *, details=False, words=False,
                      per_frame=False, order="graphs", progress=None, alignments_wspecifier=None,
                      scores_wspecifier=None, per_frame_wspecifier=None):
        """Yields (key, numpy int32 transition-ids) for each aligned
        utterance, in input order: what gmm-align-compiled writes. With
        details=True: an AlignResult for every utterance that reached the
        decoder (failures too). order="features": kalpy's order (features in
        order, graphs by key). progress(done, errors, frames) after each
        batch (a true return stops). The *_wspecifier outputs are written
        as gmm-align-compiled writes them. Leaving the loop early stops the
        work (the outputs are then abandoned)."""
        return _ArchiveRun(self, lib.kga_align_archive, graphs_rspecifier, feats_rspecifier,
                           details, words, per_frame, order, progress, alignments_wspecifier,
                           scores_wspecifier, per_frame_wspecifier).items()

    def align_batch(self, keys, graphs, feats, *, words=False, per_frame=False):
        """Aligns utterances in memory at once, whatever speakers they
        belong to: keys (str or None), graphs (Graph, OpenFst bytes, or Fsts
        with write_to_string()), feats (2-d float32 arrays). Returns one
        AlignResult per utterance, in order."""
        n = len(feats)
        if keys is None:
            keys = [None] * n
        if not (len(keys) == len(graphs) == n):
            raise ValueError("keys, graphs and feats differ in length")
        gs = [_as_graph(g) for g in graphs]
        fs = [np.ascontiguousarray(f, dtype=np.float32) for f in feats]
        ks = [_lib.enc(k) for k in keys]
        utts = (_lib.Utt * max(n, 1))()
        for i in range(n):
            if fs[i].ndim != 2:
                raise ValueError(f"features {i}: a 2-d array, not {fs[i].ndim}-d")
            utts[i] = _lib.Utt(ks[i], gs[i]._h.value, fs[i].ctypes.data_as(POINTER(c_float)),
                               fs[i].shape[0], fs[i].shape[1])
        out = (_lib.AlignResultC * max(n, 1))()
        flags = (_lib.WANT_WORDS if words else 0) | (_lib.WANT_PER_FRAME if per_frame else 0)
        _lib.check(lib.kga_align_batch(self._h, n, utts, flags, out))
        try:
            return [AlignResult(out[i], words, per_frame) for i in range(n)]
        finally:
            lib.kga_align_results_free(out, n)


_open_runs = threading.local()  # archive loops this thread is inside


def _no_open_run():
    """Archive calls run one at a time per process: one started inside the
    loop of another (same thread) would wait for that loop forever."""
    if getattr(_open_runs, "n", 0):
        raise RuntimeError("an archive call inside an align_archive loop: archive calls run "
                           "one at a time (finish or close the loop first; in-memory calls "
                           "are fine here)")


class _ArchiveRun:
    """An archive call run in a thread of its own (the GIL released while
    C works), its results handed over a batch at a time."""

    _END = object()

    def __init__(self, owner, fn, graphs, feats, details, words, per_frame, order, progress,
                 ali_ws, scores_ws, per_frame_ws):
        _no_open_run()
        if order not in _lib.ORDER:
            raise ValueError(f"order={order!r}: graphs or features")
        self.owner, self.fn = owner, fn
        self.args = (_lib.enc(graphs), _lib.enc(feats))
        self.details, self.words, self.per_frame = details, words, per_frame
        self.q = queue.Queue(maxsize=8)
        self.stop = threading.Event()
        self.cbs = _Callbacks()
        o = _lib.ArchiveOpts()
        lib.kga_archive_opts_init(byref(o))
        self.keep = [_lib.enc(ali_ws), _lib.enc(scores_ws), _lib.enc(per_frame_ws)]
        o.alignments_wspecifier, o.scores_wspecifier, o.per_frame_wspecifier = self.keep
        o.order = _lib.ORDER[order]
        o.flags = (_lib.WANT_WORDS if words else 0) | (_lib.WANT_PER_FRAME if per_frame else 0)
        self.results_cb = _lib.RESULTS_FN(self.cbs.guard(self._on_results))
        self.progress_cb = _progress_cb(self.cbs, progress)
        o.results, o.progress = self.results_cb, self.progress_cb
        self.opts = o
        self.counts = _lib.AlignCounts()
        self.status = None

    def _on_results(self, user, n, r):
        batch = []
        for i in range(n):
            x = r[i]
            if self.details:
                batch.append(AlignResult(x, self.words, self.per_frame))
            elif x.status == 0:
                batch.append((x.key.decode("utf-8", "replace"),
                              np.ctypeslib.as_array(x.ali, (x.num_frames,)).copy()))
        while not self.stop.is_set():
            try:
                self.q.put(batch, timeout=0.1)
                return 0
            except queue.Full:
                continue
        return 1  # the consumer left: stop the work

    def _run(self):
        st = self.fn(self.owner._h, self.args[0], self.args[1], byref(self.opts),
                     byref(self.counts))
        err = _lib.last_error()  # this thread's
        self.q.put((self._END, st, err))

    def items(self):
        _no_open_run()
        t = threading.Thread(target=self._run, name="kaldi-gpu-align", daemon=True)
        t.start()
        _open_runs.n = getattr(_open_runs, "n", 0) + 1
        try:
            while True:
                item = self.q.get()
                if isinstance(item, tuple) and item and item[0] is self._END:
                    _, st, err = item
                    self.status = st
                    if st != _lib.OK:
                        if self.cbs.pending:
                            raise self.cbs.pending[0]
                        cls = {_lib.EINVAL: ValueError, _lib.ENOMEM: MemoryError}.get(st)
                        if cls:
                            raise cls(err)
                        raise (Cancelled if st == _lib.ECANCELED else KaldiError)(err, st)
                    return
                yield from item
        finally:
            _open_runs.n -= 1
            self.stop.set()
            while t.is_alive():
                try:
                    self.q.get(timeout=0.1)
                except queue.Empty:
                    pass
            t.join()


# ---------------- the accumulator ----------------

def _stats_bytes(fn, h, binary):
    buf, n = c_void_p(), c_size_t()
    _lib.check(fn(h, int(bool(binary)), byref(buf), byref(n)))
    try:
        return ctypes.string_at(buf, n.value)
    finally:
        lib.kga_free(buf)


class Accumulator(_Handle):
    """gmm-acc-stats-ali with a model: the statistics add up over the calls
    (accumulate_archive, accumulate_batch) until write() / stats_bytes()
    give gmm-acc-stats-ali's file."""

    _free = lib.kga_acc_free

    def __init__(self, model_path, *, use_gpu="optional", log=None):
        self._h = None
        self._set_log(log)
        self.model_path = str(model_path)
        o = _lib.AccOpts()
        lib.kga_acc_opts_init(byref(o))
        o.use_gpu = _gpu_mode(use_gpu)
        o.log, o.log_user = _lib.LOG_CALLBACK, self._sink
        h = c_void_p()
        _lib.check(lib.kga_acc_new(byref(h), _lib.enc(model_path), byref(o)))
        self._h = h

    @property
    def is_gpu(self):
        return bool(lib.kga_acc_is_gpu(self._h))

    def accumulate_archive(self, feats_rspecifier, ali_rspecifier, *, progress=None):
        """gmm-acc-stats-ali's loop over the tables; returns this call's
        counts (done, errors, frames, total_like)."""
        _no_open_run()
        cbs = _Callbacks()
        cb = _progress_cb(cbs, progress)
        c = _lib.AccCounts()
        st = lib.kga_acc_archive(self._h, _lib.enc(feats_rspecifier), _lib.enc(ali_rspecifier),
                                 cb, None, byref(c))
        _lib.check(st, cbs.pending)
        return _counts(c)

    def accumulate_batch(self, keys, feats, alignments):
        """Utterances in memory: 2-d float32 features and their int32
        alignments. Returns each one's log-likelihood (numpy float32; 0 for
        one skipped for a wrong-size alignment)."""
        n = len(feats)
        if keys is None:
            keys = [None] * n
        if not (len(keys) == len(alignments) == n):
            raise ValueError("keys, feats and alignments differ in length")
        fs = [np.ascontiguousarray(f, dtype=np.float32) for f in feats]
        al = [np.ascontiguousarray(a, dtype=np.int32) for a in alignments]
        ks = [_lib.enc(k) for k in keys]
        utts = (_lib.AccUtt * max(n, 1))()
        for i in range(n):
            if fs[i].ndim != 2:
                raise ValueError(f"features {i}: a 2-d array, not {fs[i].ndim}-d")
            utts[i] = _lib.AccUtt(ks[i], fs[i].ctypes.data_as(POINTER(c_float)), fs[i].shape[0],
                                  fs[i].shape[1], al[i].ctypes.data_as(POINTER(c_int32)),
                                  len(al[i]))
        likes = np.zeros(max(n, 1), np.float32)
        _lib.check(lib.kga_acc_batch(self._h, n, utts, likes.ctypes.data_as(POINTER(c_float))))
        return likes[:n]

    @property
    def counts(self):
        c = _lib.AccCounts()
        lib.kga_acc_get_counts(self._h, byref(c))
        return _counts(c)

    def write(self, path, binary=True):
        """Writes gmm-acc-stats-ali's <stats-out> (a wxfilename)."""
        _lib.check(lib.kga_acc_write(self._h, _lib.enc(path), int(bool(binary))))

    def stats_bytes(self, binary=True):
        """The bytes write() would write."""
        return _stats_bytes(lib.kga_acc_write_mem, self._h, binary)

    def reset(self):
        _lib.check(lib.kga_acc_reset(self._h))


def _counts(c):
    return {"done": c.done, "errors": c.errors, "frames": c.frames, "total_like": c.total_like}


class AlignAccumulator(_Handle):
    """gmm-align-acc-compiled: align_archive() yields what
    Aligner.align_archive yields and accumulates the aligned utterances;
    write() / stats_bytes() give the statistics."""

    _free = lib.kga_fused_free

    def __init__(self, model_path, *, beam=10, retry_beam=40, transition_scale=1.0,
                 acoustic_scale=0.1, self_loop_scale=0.1, careful=False, use_gpu="optional",
                 batch_size=8192, num_gpus=1, log=None):
        self._h = None
        self._set_log(log)
        self._opts = _aligner_opts(beam, retry_beam, transition_scale, acoustic_scale,
                                   self_loop_scale, careful, use_gpu, batch_size, num_gpus,
                                   self._sink)
        h = c_void_p()
        _lib.check(lib.kga_fused_new(byref(h), _lib.enc(model_path), byref(self._opts)))
        self._h = h

    def align_archive(self, graphs_rspecifier, feats_rspecifier, *, details=False,
                      progress=None, alignments_wspecifier=None):
        return _ArchiveRun(self, lib.kga_fused_archive, graphs_rspecifier, feats_rspecifier,
                           details, False, False, "graphs", progress, alignments_wspecifier,
                           None, None).items()

    def write(self, path, binary=True):
        _lib.check(lib.kga_fused_write(self._h, _lib.enc(path), int(bool(binary))))

    def stats_bytes(self, binary=True):
        return _stats_bytes(lib.kga_fused_write_mem, self._h, binary)


# ---------------- tables ----------------

def _read(fn, cb_type, conv, rspecifier, log):
    out = []
    cbs = _Callbacks()

    def each(user, key, p, *dims):
        out.append((key.decode("utf-8", "replace"), conv(p, *dims)))

    cb = cb_type(cbs.guard(each))
    sink = _lib.register_sink(log)
    try:
        _lib.check(fn(_lib.enc(rspecifier), cb, None, _lib.LOG_CALLBACK, sink), cbs.pending)
    finally:
        _lib.unregister_sink(sink)
    return out


def read_matrices(rspecifier, log=None):
    """[(key, float32 rows x cols)] of a table of matrices (features),
    with the recipes' feature pipes computed in-process."""
    return _read(lib.kga_read_matrices, _lib.MATRIX_FN,
                 lambda p, r, c: (np.ctypeslib.as_array(p, (r, c)).copy() if r * c
                                  else np.zeros((r, c), np.float32)), rspecifier, log)


def _fst_size(b, pos):
    """Bytes of the binary OpenFst VectorFst (StdArc) starting at pos."""
    start = pos
    magic, = struct.unpack_from("<i", b, pos)
    if magic != 2125659606:
        raise ValueError("not an OpenFst binary FST")
    pos += 4
    for _ in range(2):  # fst type, arc type
        n, = struct.unpack_from("<i", b, pos)
        pos += 4 + n
    _version, flags = struct.unpack_from("<ii", b, pos)
    pos += 8 + 8  # + properties
    _start, nstates, _narcs = struct.unpack_from("<qqq", b, pos)
    pos += 24
    if flags & 3:
        raise ValueError("FSTs with symbol tables are not supported")
    for _ in range(nstates):
        narcs, = struct.unpack_from("<q", b, pos + 4)
        pos += 12 + 16 * narcs
    return pos - start


def read_graphs(path):
    """[(key, Graph)] of a Kaldi archive of training graphs (a plain or
    gzip-compressed file, as compile-train-graphs writes them)."""
    with open(path, "rb") as f:
        b = f.read()
    if b[:2] == b"\x1f\x8b":
        b = gzip.decompress(b)
    out, pos = [], 0
    while pos < len(b):
        sp = b.index(b" ", pos)
        key = b[pos:sp].decode("utf-8", "replace")
        pos = sp + 1
        if b[pos:pos + 2] == b"\0B":
            pos += 2
        n = _fst_size(b, pos)
        out.append((key, Graph.from_openfst(b[pos:pos + n])))
        pos += n
        while pos < len(b) and b[pos:pos + 1] in (b"\n", b" "):
            pos += 1
    return out


def read_int32_vectors(rspecifier, log=None):
    """[(key, int32 vector)] of a table of int32 vectors (alignments)."""
    return _read(lib.kga_read_int32_vectors, _lib.IVEC_FN,
                 lambda p, n: np.ctypeslib.as_array(p, (n,)).copy() if n
                 else np.zeros(0, np.int32), rspecifier, log)
