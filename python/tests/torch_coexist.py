#!/usr/bin/env python3
"""Our CUDA library and a CUDA build of PyTorch in one process, both orders.

Each case runs in a fresh interpreter:
  torch-first: import torch, then load our library and run the probe;
  ours-first:  load our library and run the probe, then import torch;
and checks that
  - both load and the probe succeeds (kalpy's CUDA build fails here: an
    ImportError naming a cuBLAS symbol, kalpy issue 31);
  - torch.cuda.is_available() is the same as in a process without our library;
  - every cuBLAS in the process binds to the cublasLt of its own folder
    (two cuBLAS copies of different minor versions whose libcublas binds to
    the other's libcublasLt is the mixed state behind that issue: it happens
    as soon as a library dlopen()s a cuBLAS by another path than torch's);
  - with a GPU: a torch matmul on the device before and after our probe.

The probe: with the package importable, kaldi_gpu_align's Aligner on
tests/data (mono, recipe options) compared with Kaldi's alignment, its
likelihoods through cuBLAS (KALDI_GPU_DEV_LIKELIHOODS=gemm: on a GPU our
library then loads cuBLAS, next to torch's); without
it, --lib PATH [--probe SYMBOL] loads a shared library through ctypes and
calls SYMBOL (int (*)(void)) if given.

Usage: python/tests/torch_coexist.py [--lib PATH --probe SYMBOL]
Exits 77 (after "SKIP: why") without torch or anything to probe.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "tests" / "data"

CHILD = r"""
import ctypes, json, os, re, sys
order, lib, probe, data, here = sys.argv[1:6]
out = {}
def run_probe():
    if lib == "-":
        # the cuBLAS path of the likelihoods, so that a GPU run loads cuBLAS
        os.environ.setdefault("KALDI_GPU_DEV_LIKELIHOODS", "gemm")
        sys.path.insert(0, here)
        import numpy as np, kaldi_gpu_align as kga, kaldi_ark
        al = kga.Aligner(os.path.join(data, "models/mono/final.mdl"), beam=10, retry_beam=40,
                         transition_scale=1.0, acoustic_scale=0.1, self_loop_scale=0.1)
        got = list(al.align_archive("ark:gunzip -c " + os.path.join(data, "graphs/mono.fsts.gz") + "|",
                                    "ark:" + os.path.join(data, "feats/delta.ark")))
        ref = kaldi_ark.read_int32_vectors(os.path.join(data, "kaldi/mono/ali.ark"))
        out["probe"] = len(got) == len(ref) and all(
            a[0] == b[0] and np.array_equal(a[1], b[1]) for a, b in zip(got, ref))
    else:
        h = ctypes.CDLL(lib)
        out["probe"] = True if probe == "-" else getattr(h, probe)()
def torch_part():
    import torch
    out["torch"] = torch.__version__
    out["cuda_available"] = torch.cuda.is_available()
    if out["cuda_available"]:
        a = torch.ones(64, 64, device="cuda")
        out["matmul"] = float((a @ a).sum().item())
if order == "torch-only":
    torch_part()
elif order == "torch-first":
    torch_part(); run_probe()
    if out["cuda_available"]:
        torch_part()
else:
    run_probe(); torch_part()
out["cublas"] = sorted(set(l.split()[-1] for l in open("/proc/self/maps")
                           if re.search(r"/libcublas(Lt)?\.so", l)))
print("RESULT " + json.dumps(out))
"""


def run_case(order, lib, probe, ld_debug):
    env = dict(os.environ)
    if ld_debug:
        env["LD_DEBUG"] = "bindings"
        env["LD_DEBUG_OUTPUT"] = ld_debug
    p = subprocess.run([sys.executable, "-c", CHILD, order, lib, probe, str(DATA), str(HERE)],
                       capture_output=True, text=True, env=env)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:]), p.stderr
    return None, (p.stderr or p.stdout)[-2000:]


def mixed_cublas(ld_prefix):
    """(libcublas, libcublasLt it binds to) pairs from different folders."""
    pairs = set()
    folder = os.path.dirname(ld_prefix)
    for name in os.listdir(folder):
        if not name.startswith(os.path.basename(ld_prefix)):
            continue
        with open(os.path.join(folder, name), errors="replace") as f:
            for line in f:
                if "binding file" not in line or "libcublas.so" not in line:
                    continue
                parts = line.split()
                src = parts[parts.index("file") + 1]
                dst = parts[parts.index("to") + 1]
                if "/libcublasLt.so" in dst and os.path.dirname(src) != os.path.dirname(dst):
                    pairs.add((src, dst))
        os.unlink(os.path.join(folder, name))
    return sorted(pairs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", help="shared library to load when the package is not importable")
    ap.add_argument("--probe", help="int (*)(void) symbol of --lib to call")
    args = ap.parse_args()
    if importlib.util.find_spec("torch") is None:
        print("SKIP: torch not importable")
        return 77
    if importlib.util.find_spec("kaldi_gpu_align") is not None and not args.lib:
        lib, probe = "-", "-"
    elif args.lib:
        lib, probe = str(Path(args.lib).resolve()), args.probe or "-"
    else:
        print("SKIP: kaldi_gpu_align not importable and no --lib given")
        return 77
    passed = failed = 0

    def check(name, ok, detail=""):
        nonlocal passed, failed
        if ok:
            passed += 1
            print(f"PASS: {name}")
        else:
            failed += 1
            print(f"FAIL: {name}{': ' + detail if detail else ''}")

    base, err = run_case("torch-only", lib, probe, None)
    if base is None:
        print(f"SKIP: torch alone does not import: {err}")
        return 77
    print(f"torch {base['torch']}, cuda available: {base['cuda_available']}")
    for order in ("torch-first", "ours-first"):
        tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"coexist-{os.getpid()}-{order}"
        res, err = run_case(order, lib, probe, str(tmp))
        mixed = mixed_cublas(str(tmp))
        check(f"{order}: both load, probe succeeds", res is not None and bool(res["probe"]),
              err if res is None else f"probe returned {res['probe']}")
        if res is None:
            continue
        check(f"{order}: torch.cuda.is_available() unchanged",
              res["cuda_available"] == base["cuda_available"])
        check(f"{order}: each cuBLAS binds its own cublasLt", not mixed,
              "; ".join(f"{a} -> {b}" for a, b in mixed))
        if base["cuda_available"]:
            check(f"{order}: torch matmul on the device", res.get("matmul") == 64.0 * 64 * 64)
        print(f"    cuBLAS mapped: {res['cublas'] or 'none'}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
