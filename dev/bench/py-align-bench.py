#!/usr/bin/env python3
"""One Aligner.align_archive over an archive pair, timed (the Python side of
dev/device/python-bench.sh). Prints "utterances U frames F seconds S" (S:
the align_archive loop; the process's own wall time is the caller's), and
with --check RSPEC whether every (key, alignment) equals that archive's
(gmm-align-compiled's output on the same data).

Usage: py-align-bench.py MODEL GRAPHS_RSPEC FEATS_RSPEC [--use-gpu yes]
                         [--check ALI_RSPEC]
"""
import argparse
import time

import kaldi_gpu_align as kga


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("graphs")
    ap.add_argument("feats")
    ap.add_argument("--use-gpu", default="yes")
    ap.add_argument("--check")
    a = ap.parse_args()
    t0 = time.time()
    al = kga.Aligner(a.model, beam=10, retry_beam=40, transition_scale=1.0, acoustic_scale=0.1,
                     self_loop_scale=0.1, use_gpu=a.use_gpu)
    n = frames = 0
    keep = {} if a.check else None
    for key, ali in al.align_archive(a.graphs, a.feats):
        n += 1
        frames += len(ali)
        if keep is not None:
            keep[key] = ali
    took = time.time() - t0
    print(f"utterances {n} frames {frames} seconds {took:.3f} gpu {al.is_gpu}")
    if a.check:
        ref = kga.read_int32_vectors(a.check)
        same = len(ref) == len(keep) and all(k in keep and (keep[k] == v).all() for k, v in ref)
        print(f"alignments equal to {a.check}: {same} ({len(ref)} vs {len(keep)})")
        return 0 if same else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
