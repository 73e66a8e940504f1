#!/usr/bin/env python3
"""kalpy-level oracle tests on tests/data.

Runs kalpy's GmmAligner and GmmStatsAccumulator (kalpy-kaldi from PyPI) and
our kaldi_gpu_align.kalpy layer (when built) with the options of the Kaldi
fixture commands (tests/data/README.md) and checks, for each implementation
found:
  - align_utterances: the yielded keys in feature order, alignments equal to
    Kaldi's gmm-align-compiled archive, failures as (key, None), likelihoods
    times the acoustic scale equal to Kaldi's scores table (-(graph +
    acoustic cost), written with 7 significant digits);
  - export_alignments: the archive byte-identical to Kaldi's;
  - careful mode, beam 200, the noisy set (retries, failures), the edge set
    (zero-length features, missing graph, failed utterance);
  - export_stats: byte-identical to gmm-acc-stats-ali's file (to the file of
    the matching CPU family: kaldi/M/final.acc from an AVX-512 host,
    kaldi/hsw/mono.acc from an AVX2 host, see tests/data/README.md);
and, when both are importable, our layer against kalpy itself: alignments,
words, likelihoods and per-frame likelihoods bit for bit, statistics bytes.

Usage: python/tests/kalpy_side_by_side.py [--impl kalpy|ours|both] [-v]
Exits 77 (after "SKIP: why") when the implementations asked for cannot be
imported (both: either one), 1 on any failure. Last line: "N passed, N
failed".
"""
from __future__ import annotations

import argparse
import gzip
import importlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import kaldi_ark  # noqa: E402

DATA = HERE.parent.parent / "tests" / "data"
# gmm-align-compiled's options in every fixture command
KALDI_OPTS = dict(acoustic_scale=0.1, transition_scale=1.0, self_loop_scale=0.1,
                  beam=10, retry_beam=40, careful=False)


class Impl:
    """One implementation of kalpy's API: its aligner, accumulator and
    archive classes (ours may bring its own archive classes; otherwise
    kalpy's are used, which is what MFA hands it)."""

    def __init__(self, name, module_names):
        self.name = name
        self.align = importlib.import_module(module_names["align"])
        self.train = importlib.import_module(module_names["train"])
        self.fst_data = importlib.import_module(module_names["fst_data"])
        self.feat_data = importlib.import_module(module_names["feat_data"])
        self.gmm_data = importlib.import_module(module_names["gmm_data"])

    def aligner(self, model, **kw):
        return self.align.GmmAligner(str(model), **kw)

    def accumulator(self, model):
        return self.train.GmmStatsAccumulator(str(model))

    def fsts(self, path):
        return self.fst_data.FstArchive(str(path))

    def feats(self, path):
        return self.feat_data.FeatureArchive(str(path))

    def alis(self, path):
        return self.gmm_data.AlignmentArchive(str(path))


def load_impls(which):
    impls, why = [], []
    if which in ("kalpy", "both"):
        try:
            impls.append(Impl("kalpy", dict(
                align="kalpy.gmm.align", train="kalpy.gmm.train",
                fst_data="kalpy.decoder.data", feat_data="kalpy.feat.data",
                gmm_data="kalpy.gmm.data")))
        except ImportError as e:
            why.append(f"kalpy not importable ({e})")
    if which in ("ours", "both"):
        try:
            ours = importlib.import_module("kaldi_gpu_align.kalpy")
            name = "kaldi_gpu_align.kalpy"
            # our archive classes if the layer has them, else kalpy's
            arch = {k: (name if hasattr(ours, cls) else default)
                    for k, cls, default in (
                        ("fst_data", "FstArchive", "kalpy.decoder.data"),
                        ("feat_data", "FeatureArchive", "kalpy.feat.data"),
                        ("gmm_data", "AlignmentArchive", "kalpy.gmm.data"))}
            impls.append(Impl("ours", dict(align=name, train=name, **arch)))
        except ImportError as e:
            why.append(f"kaldi_gpu_align.kalpy not importable ({e})")
    return impls, why


def as_np(v, dtype):
    if v is None:
        return None
    if hasattr(v, "numpy"):
        return np.asarray(v.numpy(), dtype=dtype).reshape(-1)
    try:
        return np.asarray(v, dtype=dtype).reshape(-1)
    except TypeError:  # a sequence without the buffer protocol
        return np.array([v[i] for i in range(len(v))], dtype=dtype)


def normalise(item):
    """An align_utterances item -> (key, dict or None)."""
    if isinstance(item, tuple):
        key, val = item
        assert val is None, f"tuple item with a value: {item!r}"
        return str(key), None
    return str(item.utterance_id), dict(
        ali=as_np(item.alignment, np.int32),
        words=as_np(item.words, np.int32),
        like=np.float32(item.likelihood),
        per_frame=as_np(getattr(item, "per_frame_likelihoods", None), np.float32))


class Results:
    def __init__(self, verbose):
        self.passed = self.failed = 0
        self.verbose = verbose

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            if self.verbose:
                print(f"PASS: {name}")
        else:
            self.failed += 1
            print(f"FAIL: {name}{': ' + detail if detail else ''}")


def gunzip_to(src, dst_dir):
    """src (relative, .gz) -> the same relative path under dst_dir, unzipped."""
    dst = Path(dst_dir) / str(src)[:-3]
    dst.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(src, "rb") as fi, open(dst, "wb") as fo:
        shutil.copyfileobj(fi, fo)
    return dst


def run_align(impl, model, graphs, feats, **opts):
    kw = dict(KALDI_OPTS)
    kw.update(opts)
    aligner = impl.aligner(model, **kw)
    return [normalise(x) for x in aligner.align_utterances(impl.fsts(graphs), impl.feats(feats))]


def expected_items(feats_path, graph_keys, ali_path):
    """kalpy's order: features in archive order, skipping zero-length ones and
    keys without a graph; a key absent from Kaldi's archive failed."""
    ref = dict(kaldi_ark.read_int32_vectors(ali_path))
    out = []
    for key, mat in kaldi_ark.read_float_matrices(feats_path):
        if mat.shape[0] == 0 or key not in graph_keys:
            continue
        out.append((key, ref.get(key)))
    return out


def compare_to_kaldi(res, label, got, expected, scores=None):
    keys_got = [k for k, _ in got]
    keys_exp = [k for k, _ in expected]
    res.check(f"{label}: keys in order", keys_got == keys_exp,
              f"got {len(keys_got)} keys, expected {len(keys_exp)}")
    got_d = dict(got)
    bad_ali, bad_fail, bad_like = [], [], []
    for key, ref in expected:
        g = got_d.get(key, "missing")
        if isinstance(g, str):
            continue
        if ref is None:
            if g is not None:
                bad_fail.append(key)
            continue
        if g is None or not np.array_equal(g["ali"], ref):
            bad_ali.append(key)
            continue
        if scores is not None:
            # gmm-align-compiled's scores are -(graph + acoustic cost); kalpy's
            # likelihood is that over the acoustic scale (both float32); the
            # table has 7 significant digits
            score = float(scores[key])
            like = float(g["like"]) * KALDI_OPTS["acoustic_scale"]
            if abs(like - score) > 1e-6 * abs(score):
                bad_like.append(f"{key} {g['like']} x {KALDI_OPTS['acoustic_scale']} vs {score}")
    res.check(f"{label}: alignments = Kaldi's", not bad_ali, f"differ: {bad_ali[:5]}")
    res.check(f"{label}: failures as (key, None)", not bad_fail, f"not failed: {bad_fail[:5]}")
    if scores is not None:
        res.check(f"{label}: likelihoods = Kaldi's scores", not bad_like, "; ".join(bad_like[:5]))


def compare_impls(res, label, a, b):
    """ours vs kalpy, bit for bit."""
    res.check(f"{label}: same keys", [k for k, _ in a] == [k for k, _ in b])
    diffs = []
    for (ka, va), (kb, vb) in zip(a, b):
        if (va is None) != (vb is None):
            diffs.append(f"{ka}: failure differs")
            continue
        if va is None:
            continue
        for field in ("ali", "words", "per_frame"):
            x, y = va[field], vb[field]
            if (x is None) != (y is None) or (x is not None and (
                    x.shape != y.shape or x.tobytes() != y.tobytes())):
                diffs.append(f"{ka}: {field}")
        if va["like"].tobytes() != vb["like"].tobytes():
            diffs.append(f"{ka}: likelihood {va['like']} vs {vb['like']}")
    res.check(f"{label}: ours = kalpy (alignments, words, likelihoods, per-frame)",
              not diffs, "; ".join(diffs[:5]))


def graph_keys_of(text_int):
    with open(text_int, encoding="utf-8") as f:
        return {line.split()[0] for line in f if line.strip()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--impl", choices=("kalpy", "ours", "both"), default="both")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    impls, why = load_impls(args.impl)
    for w in why:
        print(f"note: {w}")
    if not impls:
        print("SKIP: no kalpy-compatible implementation importable: " + "; ".join(why))
        return 77
    if args.impl == "both" and len(impls) < 2:
        print("SKIP: the side-by-side needs both: " + "; ".join(why))
        return 77
    res = Results(args.verbose)
    os.chdir(DATA)  # the fixture commands' relative paths
    tmp = tempfile.mkdtemp(prefix="kalpy-sbs-")
    try:
        graphs = {m: gunzip_to(f"graphs/{m}.fsts.gz", tmp) for m in ("mono", "tri1", "tri2")}
        edge_graphs = gunzip_to("edge/mono.fsts.gz", tmp)
        all_keys = graph_keys_of("kaldi/text.int")
        feats = {"mono": "feats/delta.ark", "tri1": "feats/delta.ark", "tri2": "feats/lda.ark"}
        outputs = {}
        for impl in impls:
            out = outputs[impl.name] = {}
            for m in ("mono", "tri1", "tri2"):
                mdl = f"models/{m}/final.mdl"
                label = f"{impl.name} {m}"
                got = run_align(impl, mdl, graphs[m], feats[m])
                out[m] = got
                compare_to_kaldi(res, label, got,
                                 expected_items(feats[m], all_keys, f"kaldi/{m}/ali.ark"),
                                 kaldi_ark.read_float_table(f"kaldi/{m}/scores.txt"))
                got = run_align(impl, mdl, graphs[m], feats[m], careful=True)
                out[m + "-careful"] = got
                compare_to_kaldi(res, label + " careful", got, expected_items(
                    feats[m], all_keys, f"kaldi/{m}/ali-careful.ark"))
                # kalpy raises a retry beam <= beam to 4 x beam; Kaldi's
                # beam-200 run had none: same result while nothing fails
                got = run_align(impl, mdl, graphs[m], feats[m], beam=200)
                out[m + "-beam200"] = got
                compare_to_kaldi(res, label + " beam 200", got, expected_items(
                    feats[m], all_keys, f"kaldi/{m}/ali-beam200.ark"))
                # export_alignments: the archive bytes
                ali_out = Path(tmp) / f"{impl.name}-{m}.ark"
                impl.aligner(mdl, **KALDI_OPTS).export_alignments(
                    str(ali_out), impl.fsts(graphs[m]), impl.feats(feats[m]))
                res.check(f"{label} export_alignments: bytes = kaldi/{m}/ali.ark",
                          ali_out.read_bytes() == Path(f"kaldi/{m}/ali.ark").read_bytes())
            for m in ("mono", "tri1"):
                got = run_align(impl, f"models/{m}/final.mdl", graphs[m], "noisy/delta.ark")
                out["noisy-" + m] = got
                compare_to_kaldi(res, f"{impl.name} noisy {m}", got, expected_items(
                    "noisy/delta.ark", all_keys, f"noisy/{m}.ali.ark"))
            got = run_align(impl, "models/mono/final.mdl", edge_graphs, "edge/feats.ark")
            out["edge"] = got
            compare_to_kaldi(res, f"{impl.name} edge", got, expected_items(
                "edge/feats.ark", graph_keys_of("edge/text4.int"), "edge/ali.ark"))
            # statistics: gmm-acc-stats-ali's bytes, per CPU family
            for m, ali_ref, refs in (
                    ("mono", "kaldi/mono/ali.ark", ["kaldi/mono/final.acc", "kaldi/hsw/mono.acc"]),
                    ("tri2", "kaldi/tri2/ali.ark", ["kaldi/tri2/final.acc"])):
                acc_out = Path(tmp) / f"{impl.name}-{m}.acc"
                impl.accumulator(f"models/{m}/final.mdl").export_stats(
                    str(acc_out), impl.feats(feats[m]), impl.alis(ali_ref))
                data = acc_out.read_bytes()
                out["acc-" + m] = data
                match = [r for r in refs if Path(r).read_bytes() == data]
                res.check(f"{impl.name} {m} export_stats: bytes = gmm-acc-stats-ali's",
                          bool(match), f"differs from {', '.join(refs)}")
                if match and args.verbose:
                    print(f"    ({m}: equals {match[0]})")
        if len(outputs) == 2:
            a, b = outputs["ours"], outputs["kalpy"]
            for label in a:
                if label.startswith("acc-"):
                    res.check(f"{label}: ours = kalpy (bytes)", a[label] == b[label])
                else:
                    compare_impls(res, label, a[label], b[label])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{res.passed} passed, {res.failed} failed")
    return 1 if res.failed else 0


if __name__ == "__main__":
    sys.exit(main())
