"""ctypes view of libkaldi-gpu-align.so (include/kaldi-gpu-align.h).

Loading order: $KALDI_GPU_LIBRARY; the copy installed in this package;
the build tree this package sits in (python/../build); the system's
libkaldi-gpu-align.so.1. Loading the library touches no GPU. ctypes
releases the GIL around every call into it and takes it back for the
callbacks, so Python threads run while the library works.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys
import threading
from ctypes import (CFUNCTYPE, POINTER, Structure, byref, c_char_p, c_double, c_float,
                    c_int, c_int32, c_int64, c_size_t, c_uint, c_void_p)
from pathlib import Path

# ---------------- status codes and the exceptions they become ----------------

OK, ERROR, EINVAL, ENOMEM, ECANCELED = 0, -1, -2, -3, -4
LOG_INFO, LOG_WARNING, LOG_ERROR, LOG_ASSERT = 0, -1, -2, -3
GPU_MODES = {"no": 0, "yes": 1, "optional": 2, "wait": 3}
UTT_STATUS = ("aligned", "failed", "empty_graph", "no_frames")
WANT_PER_FRAME, WANT_WORDS = 1, 2
ORDER = {"graphs": 0, "features": 1}


class KaldiError(RuntimeError):
    """A fatal error of Kaldi's (what the program prints as an ERROR line
    and exits 255 for); str() is the ERROR line's message."""

    def __init__(self, message, status=ERROR):
        super().__init__(message)
        self.status = status


class Cancelled(KaldiError):
    """A callback asked the library to stop."""


# ---------------- structs (layouts checked against kga_sizeof) ----------------

class LogLine(Structure):
    _fields_ = [("level", c_int), ("program", c_char_p), ("func", c_char_p),
                ("file", c_char_p), ("line", c_int), ("msg", c_char_p), ("text", c_char_p)]


LOG_FN = CFUNCTYPE(None, c_void_p, POINTER(LogLine))
PROGRESS_FN = CFUNCTYPE(c_int, c_void_p, c_int64, c_int64, c_int64)


class AlignResultC(Structure):
    _fields_ = [("key", c_char_p), ("status", c_int), ("retried", c_int),
                ("num_frames", c_int32), ("ali", POINTER(c_int32)), ("like", c_float),
                ("score", c_float), ("per_frame", POINTER(c_float)),
                ("words", POINTER(c_int32)), ("num_words", c_int32)]


RESULT_FN = CFUNCTYPE(c_int, c_void_p, POINTER(AlignResultC))
RESULTS_FN = CFUNCTYPE(c_int, c_void_p, c_int, POINTER(AlignResultC))
MATRIX_FN = CFUNCTYPE(c_int, c_void_p, c_char_p, POINTER(c_float), c_int32, c_int32)
IVEC_FN = CFUNCTYPE(c_int, c_void_p, c_char_p, POINTER(c_int32), c_int32)


class AlignerOpts(Structure):
    _fields_ = [("beam", c_float), ("retry_beam", c_float), ("transition_scale", c_float),
                ("acoustic_scale", c_float), ("self_loop_scale", c_float), ("careful", c_int),
                ("use_gpu", c_int), ("num_gpus", c_int), ("batch_size", c_int),
                ("log", LOG_FN), ("log_user", c_void_p)]


class ArchiveOpts(Structure):
    _fields_ = [("alignments_wspecifier", c_char_p), ("scores_wspecifier", c_char_p),
                ("per_frame_wspecifier", c_char_p), ("prior_alignments_rspecifier", c_char_p),
                ("margin", c_int32), ("margin_from_output", c_int), ("order", c_int),
                ("flags", c_uint), ("device_features", c_int), ("result", RESULT_FN),
                ("results", RESULTS_FN), ("progress", PROGRESS_FN), ("user", c_void_p)]


class AlignCounts(Structure):
    _fields_ = [("done", c_int64), ("errors", c_int64), ("retried", c_int64),
                ("frames", c_int64), ("total_like", c_double)]


class Utt(Structure):
    _fields_ = [("key", c_char_p), ("graph", c_void_p), ("feats", POINTER(c_float)),
                ("rows", c_int32), ("cols", c_int32)]


class AccOpts(Structure):
    _fields_ = [("use_gpu", c_int), ("log", LOG_FN), ("log_user", c_void_p)]


class AccCounts(Structure):
    _fields_ = [("done", c_int64), ("errors", c_int64), ("frames", c_int64),
                ("total_like", c_double)]


class AccUtt(Structure):
    _fields_ = [("key", c_char_p), ("feats", POINTER(c_float)), ("rows", c_int32),
                ("cols", c_int32), ("ali", POINTER(c_int32)), ("ali_len", c_int32)]


_LAYOUTS = {"kga_log_line": LogLine, "kga_align_result": AlignResultC,
            "kga_aligner_opts": AlignerOpts, "kga_archive_opts": ArchiveOpts,
            "kga_align_counts": AlignCounts, "kga_utt": Utt, "kga_acc_opts": AccOpts,
            "kga_acc_counts": AccCounts, "kga_acc_utt": AccUtt}

# ---------------- loading ----------------


def _candidates():
    env = os.environ.get("KALDI_GPU_LIBRARY")
    if env:
        yield env
        return
    here = Path(__file__).resolve().parent
    yield str(here / "libkaldi-gpu-align.so")
    yield str(here.parent.parent / "build" / "libkaldi-gpu-align.so")  # a build tree
    found = ctypes.util.find_library("kaldi-gpu-align")
    yield found or "libkaldi-gpu-align.so.1"


def _load():
    errors = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            errors.append(f"{path}: no such file")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            errors.append(str(e))
    raise ImportError("libkaldi-gpu-align.so not found (build it with `make` in the "
                      "repository, install it with `make install`, or set "
                      "KALDI_GPU_LIBRARY): " + "; ".join(errors))


lib, library_path = _load()


def _proto(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = argtypes
    return f


_proto("kga_version", c_char_p)
_proto("kga_status_string", c_char_p, c_int)
_proto("kga_last_error", c_char_p)
_proto("kga_set_verbose", None, c_int)
_proto("kga_set_program_name", None, c_char_p)
_proto("kga_set_cublas_library", c_int, c_char_p)
_proto("kga_sizeof", c_size_t, c_char_p)
_proto("kga_free", None, c_void_p)
_proto("kga_graph_from_openfst", c_int, POINTER(c_void_p), c_char_p, c_size_t)
_proto("kga_graph_from_arrays", c_int, POINTER(c_void_p), c_int32, c_int32, c_void_p, c_void_p,
       c_void_p, c_void_p, c_void_p, c_void_p)
_proto("kga_graph_num_states", c_int32, c_void_p)
_proto("kga_graph_num_arcs", c_int32, c_void_p)
_proto("kga_graph_free", None, c_void_p)
_proto("kga_aligner_opts_init", None, POINTER(AlignerOpts))
_proto("kga_aligner_new", c_int, POINTER(c_void_p), c_char_p, POINTER(AlignerOpts))
_proto("kga_aligner_free", None, c_void_p)
_proto("kga_aligner_is_gpu", c_int, c_void_p)
_proto("kga_aligner_dim", c_int32, c_void_p)
_proto("kga_aligner_num_pdfs", c_int32, c_void_p)
_proto("kga_aligner_num_transition_ids", c_int32, c_void_p)
_proto("kga_aligner_boost_silence", c_int, c_void_p, POINTER(c_int32), c_int, c_float, c_int)
_proto("kga_archive_opts_init", None, POINTER(ArchiveOpts))
_proto("kga_align_archive", c_int, c_void_p, c_char_p, c_char_p, POINTER(ArchiveOpts),
       POINTER(AlignCounts))
_proto("kga_align_batch", c_int, c_void_p, c_int, POINTER(Utt), c_uint, POINTER(AlignResultC))
_proto("kga_align_results_free", None, POINTER(AlignResultC), c_int)
_proto("kga_acc_opts_init", None, POINTER(AccOpts))
_proto("kga_acc_new", c_int, POINTER(c_void_p), c_char_p, POINTER(AccOpts))
_proto("kga_acc_free", None, c_void_p)
_proto("kga_acc_is_gpu", c_int, c_void_p)
_proto("kga_acc_archive", c_int, c_void_p, c_char_p, c_char_p, PROGRESS_FN, c_void_p,
       POINTER(AccCounts))
_proto("kga_acc_batch", c_int, c_void_p, c_int, POINTER(AccUtt), POINTER(c_float))
_proto("kga_acc_get_counts", None, c_void_p, POINTER(AccCounts))
_proto("kga_acc_write", c_int, c_void_p, c_char_p, c_int)
_proto("kga_acc_write_mem", c_int, c_void_p, c_int, POINTER(c_void_p), POINTER(c_size_t))
_proto("kga_acc_reset", c_int, c_void_p)
_proto("kga_fused_new", c_int, POINTER(c_void_p), c_char_p, POINTER(AlignerOpts))
_proto("kga_fused_free", None, c_void_p)
_proto("kga_fused_archive", c_int, c_void_p, c_char_p, c_char_p, POINTER(ArchiveOpts),
       POINTER(AlignCounts))
_proto("kga_fused_get_counts", None, c_void_p, POINTER(AccCounts))
_proto("kga_fused_write", c_int, c_void_p, c_char_p, c_int)
_proto("kga_fused_write_mem", c_int, c_void_p, c_int, POINTER(c_void_p), POINTER(c_size_t))
_proto("kga_read_matrices", c_int, c_char_p, MATRIX_FN, c_void_p, LOG_FN, c_void_p)
_proto("kga_read_int32_vectors", c_int, c_char_p, IVEC_FN, c_void_p, LOG_FN, c_void_p)

for _name, _cls in _LAYOUTS.items():
    _size = lib.kga_sizeof(_name.encode())
    if _size != ctypes.sizeof(_cls):
        raise ImportError(f"{library_path}: {_name} is {_size} bytes, this binding expects "
                          f"{ctypes.sizeof(_cls)}: library and package do not match")

# ---------------- errors ----------------


def last_error():
    return (lib.kga_last_error() or b"").decode("utf-8", "replace")


def check(status, pending=None):
    """Raises for a failed status. pending: an exception a Python callback
    raised (the call then stopped): it is raised instead."""
    if status == OK:
        return
    if pending:
        raise pending[0]
    msg = last_error() or lib.kga_status_string(status).decode()
    if status == EINVAL:
        raise ValueError(msg)
    if status == ENOMEM:
        raise MemoryError(msg)
    if status == ECANCELED:
        raise Cancelled(msg, status)
    raise KaldiError(msg, status)


def enc(s):
    """str / PathLike -> bytes for the C side (None stays None)."""
    if s is None:
        return None
    return os.fsencode(os.fspath(s)) if not isinstance(s, bytes) else s


# ---------------- log lines ----------------

_LEVELS = {LOG_INFO: logging.INFO, LOG_WARNING: logging.WARNING, LOG_ERROR: logging.ERROR,
           LOG_ASSERT: logging.CRITICAL}
default_logger = logging.getLogger("kaldi_gpu_align")
default_logger.addHandler(logging.NullHandler())  # nothing printed unless the caller configures logging
_sinks = {}
_sinks_lock = threading.Lock()
_next_sink = [1]


def _on_log(user, line_p):
    sink = _sinks.get(user or 0)
    if sink is None:
        return
    line = line_p.contents
    level = line.level
    text = (line.text or b"").decode("utf-8", "replace")
    msg = (line.msg or b"").decode("utf-8", "replace")
    try:
        if isinstance(sink, logging.Logger):
            sink.log(_LEVELS.get(level, logging.DEBUG), "%s", msg, extra={"kaldi_line": text})
        else:
            sink(level, text, msg)
    except Exception:  # a failing handler must not kill the library's call
        pass


LOG_CALLBACK = LOG_FN(_on_log)


def register_sink(sink):
    """A log destination (a logging.Logger, or a callable(level, text,
    msg)) -> the user value the C side hands back with each line."""
    if sink is None:
        sink = default_logger
    with _sinks_lock:
        key = _next_sink[0]
        _next_sink[0] += 1
        _sinks[key] = sink
    return key


def unregister_sink(key):
    with _sinks_lock:
        _sinks.pop(key, None)


# ---------------- cuBLAS beside PyTorch ----------------


def _pip_cublas_dir():
    """The folder of the nvidia-cublas wheel's libraries (the pair PyTorch
    loads), if one is installed; None otherwise."""
    for base in sys.path:
        for sub in ("nvidia/cu13/lib", "nvidia/cublas/lib"):
            d = os.path.join(base, sub)
            if os.path.isdir(d) and any(n.startswith("libcublas.so.") for n in os.listdir(d)):
                return d
    return None


if not os.environ.get("KALDI_GPU_CUBLAS"):
    _d = _pip_cublas_dir()
    if _d:
        lib.kga_set_cublas_library(enc(_d))  # nothing is loaded now
