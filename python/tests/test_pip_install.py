#!/usr/bin/env python3
"""`pip install ./python` into a fresh virtual environment, offline (the
build backend needs nothing from the network), then the installed package
on its own (outside the tree, its bundled library) aligns tests/data as
Kaldi did. Exits 77 after "SKIP: why" without numpy, venv or pip.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOP = HERE.parent.parent
PROBE = r"""
import os, sys, kaldi_gpu_align as kga
sys.path.insert(0, sys.argv[2])
import kaldi_ark
assert kga._lib.library_path.startswith(sys.prefix), kga._lib.library_path
os.chdir(sys.argv[1])
got = list(kga.Aligner("models/mono/final.mdl", use_gpu="no").align_archive(
    "ark:gunzip -c graphs/mono.fsts.gz|", "ark:feats/delta.ark"))
ref = kaldi_ark.read_int32_vectors("kaldi/mono/ali.ark")
assert [k for k, _ in got] == [k for k, _ in ref]
assert all((a == b).all() for (_, a), (_, b) in zip(got, ref))
print("installed package OK:", kga._lib.library_path)
"""


def main():
    try:
        import numpy  # noqa: F401
    except ImportError:
        print(f"SKIP: numpy is not installed for {sys.executable}")
        return 77
    lib = os.environ.get("KALDI_GPU_LIBRARY")
    if not lib or not os.path.exists(lib):
        print("SKIP: KALDI_GPU_LIBRARY (the built library to package) not set")
        return 77
    with tempfile.TemporaryDirectory(prefix="kga-pip-") as tmp:
        venv = Path(tmp) / "venv"
        p = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            print(f"SKIP: no venv with pip for {sys.executable}: {p.stderr.strip()[-300:]}")
            return 77
        py = venv / "bin" / "python"
        env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
        p = subprocess.run([str(py), "-m", "pip", "install", "--no-index", str(TOP / "python")],
                           capture_output=True, text=True, env=env, cwd=tmp)
        if p.returncode != 0:
            print(f"FAIL: pip install ./python:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
            return 1
        env.pop("KALDI_GPU_LIBRARY")
        env.pop("PYTHONPATH", None)
        p = subprocess.run([str(py), "-c", PROBE, str(TOP / "tests" / "data"), str(HERE)],
                           capture_output=True, text=True, env=env, cwd=tmp)
        print(p.stdout + p.stderr)
        return 0 if p.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
