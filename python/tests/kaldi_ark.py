"""Minimal numpy readers for the Kaldi fixture files the Python tests compare
against (no kalpy, no Kaldi): binary and text int32-vector archives
(alignments), binary float-matrix archives (uncompressed "FM" features) and
text float tables (gmm-align-compiled's scores). Only what the tests need;
anything else raises ValueError naming the file."""
from __future__ import annotations

import gzip
import struct

import numpy as np


def _open(path):
    path = str(path)
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def _read_key(data, pos, path):
    end = data.index(b" ", pos)
    key = data[pos:end].decode()
    if not key:
        raise ValueError(f"{path}: empty key at byte {pos}")
    return key, end + 1


def _read_int32(data, pos, path):
    if data[pos] != 4:
        raise ValueError(f"{path}: expected int32 size byte at {pos}")
    return struct.unpack_from("<i", data, pos + 1)[0], pos + 5


def read_int32_vectors(path):
    """Binary or text archive of int32 vectors -> list of (key, np.int32 array)
    in file order."""
    with _open(path) as f:
        data = f.read()
    out = []
    pos = 0
    n = len(data)
    while pos < n:
        key, pos = _read_key(data, pos, path)
        if data[pos:pos + 2] == b"\0B":
            pos += 2
            size, pos = _read_int32(data, pos, path)
            # each element is a size byte (4) and a little-endian int32
            rec = np.frombuffer(data, dtype=np.uint8, count=5 * size, offset=pos)
            rec = rec.reshape(size, 5)
            if size and not np.all(rec[:, 0] == 4):
                raise ValueError(f"{path}: bad element size byte in {key}")
            vals = rec[:, 1:].copy().view("<i4").reshape(size)
            out.append((key, vals.astype(np.int32)))
            pos += 5 * size
        else:
            end = data.index(b"\n", pos)
            vals = np.array(data[pos:end].split(), dtype=np.int32)
            out.append((key, vals))
            pos = end + 1
    return out


def read_float_matrices(path):
    """Binary archive of uncompressed float matrices ("FM") -> list of
    (key, np.float32 array rows x cols)."""
    with _open(path) as f:
        data = f.read()
    out = []
    pos = 0
    while pos < len(data):
        key, pos = _read_key(data, pos, path)
        if data[pos:pos + 6] != b"\0BFM \x04":
            raise ValueError(f"{path}: {key} is not a binary float matrix (FM)")
        rows = struct.unpack_from("<i", data, pos + 6)[0]
        cols, pos = _read_int32(data, pos + 10, path)
        mat = np.frombuffer(data, dtype="<f4", count=rows * cols, offset=pos)
        out.append((key, mat.reshape(rows, cols).astype(np.float32)))
        pos += 4 * rows * cols
    return out


def read_float_table(path):
    """Text table "key value" (gmm-align-compiled's scores) -> dict of
    key -> the value's text exactly as written (compare formatted, not
    parsed: Kaldi prints floats with 7 significant digits)."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if len(parts) != 2:
                raise ValueError(f"{path}: bad line {line!r}")
            out[parts[0]] = parts[1]
    return out


def kaldi_float_text(x):
    """A float32 value as Kaldi's text writer prints it (precision 7)."""
    return format(float(np.float32(x)), ".7g")
