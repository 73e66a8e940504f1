#!/usr/bin/env python3
"""The MFA switch (python -m kaldi_gpu_align.mfa) against the installed MFA's
sources, without running MFA (it needs kalpy's _kalpy, which cannot be
installed everywhere; docs/journal/python.md):
  - every patch target is a name MFA imports from kalpy at module level (so
    replacing the module attribute is what MFA's job functions then call);
  - every call MFA's patched modules make to GmmAligner / GmmStatsAccumulator
    and to their methods binds to our classes' signatures, with MFA's
    align_options keys; the attributes MFA reads exist;
  - without _kalpy, the switch exits with a message that says so.
Exits 77 after "SKIP: why" when MFA or numpy is not installed for this Python.
"""
from __future__ import annotations

import ast
import importlib.util
import inspect
import os
import subprocess
import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
try:
    import numpy  # noqa: F401
    from kaldi_gpu_align import kalpy as ours
    from kaldi_gpu_align import mfa
except ImportError as e:
    print(f"SKIP: kaldi_gpu_align not importable for {sys.executable}: {e}")
    sys.exit(77)
SPEC = importlib.util.find_spec("montreal_forced_aligner")
if SPEC is None:
    print(f"SKIP: MFA (montreal-forced-aligner) is not installed for {sys.executable}")
    sys.exit(77)
MFA = Path(SPEC.origin).parent


def module_file(name):
    return MFA.joinpath(*name.split(".")[1:]).with_suffix(".py")


def tree(name):
    return ast.parse(module_file(name).read_text(encoding="utf-8"))


def calls(t, func_name=None, attr=None):
    """Call nodes of t: func_name(...) or X.attr(...)."""
    for n in ast.walk(t):
        if not isinstance(n, ast.Call):
            continue
        f = n.func
        if func_name and isinstance(f, ast.Name) and f.id == func_name:
            yield n
        if attr and isinstance(f, ast.Attribute) and f.attr == attr:
            yield n


def bind(test, fn, call, extra_kwargs=()):
    """Binds MFA's call (positional count, keyword names) to fn."""
    sig = inspect.signature(fn)
    kw = {k.arg: None for k in call.keywords if k.arg} | {k: None for k in extra_kwargs}
    try:
        sig.bind(*[None] * len(call.args), **kw)
    except TypeError as e:
        test.fail(f"{fn.__qualname__}{sig} does not take MFA's call at line {call.lineno} "
                  f"({len(call.args)} positional, {sorted(kw)}): {e}")


def align_option_keys():
    """The keys of MFA's align_options (AlignMixin.align_options), minus the
    boost_silence it pops before calling GmmAligner."""
    t = tree("montreal_forced_aligner.alignment.mixins")
    for n in ast.walk(t):
        if isinstance(n, ast.FunctionDef) and n.name == "align_options":
            for r in ast.walk(n):
                if isinstance(r, ast.Return) and isinstance(r.value, ast.Dict):
                    return [k.value for k in r.value.keys if isinstance(k, ast.Constant)
                            and k.value != "boost_silence"]
    return None


class Switch(unittest.TestCase):
    def test_targets_are_kalpy_imports(self):
        for mod, name, _ in mfa.PATCH_TARGETS:
            t = tree(mod)
            found = [n for n in t.body if isinstance(n, ast.ImportFrom) and
                     (n.module or "").startswith("kalpy.") and any(a.name == name for a in n.names)]
            self.assertTrue(found, f"{mod} does not import {name} from kalpy")
            self.assertTrue(list(calls(t, func_name=name)), f"{mod} never calls {name}")

    def test_calls_bind(self):
        keys = align_option_keys()
        self.assertTrue(keys, "AlignMixin.align_options not found")
        for k in keys:
            self.assertIn(k, inspect.signature(ours.GmmAligner).parameters, k)
        for mod, name, ours_name in mfa.PATCH_TARGETS:
            t = tree(mod)
            cls = getattr(ours, ours_name)
            for c in calls(t, func_name=name):
                extra = keys if any(k.arg is None for k in c.keywords) else ()
                bind(self, cls, c, extra)
        t = tree("montreal_forced_aligner.alignment.multiprocessing")
        for attr, fn in (("export_alignments", ours.GmmAligner.export_alignments),
                         ("boost_silence", ours.GmmAligner.boost_silence),
                         ("accumulate_stats", ours.GmmStatsAccumulator.accumulate_stats)):
            found = list(calls(t, attr=attr))
            self.assertTrue(found, attr)
            for c in found:  # methods: self first
                kw = {k.arg: None for k in c.keywords if k.arg}
                try:
                    inspect.signature(fn).bind(None, *[None] * len(c.args), **kw)
                except TypeError as e:
                    self.fail(f"{fn.__qualname__} does not take MFA's call at line {c.lineno}: {e}")

    def test_attributes_mfa_reads(self):
        os.chdir(HERE.parent.parent / "tests" / "data")
        a = ours.GmmAligner("models/mono/final.mdl", beam=10, retry_beam=40)
        self.assertTrue(a.acoustic_model_path.endswith("final.mdl"))
        for attr in ("transition_model", "acoustic_model"):  # kalpy objects: properties
            self.assertIsInstance(inspect.getattr_static(ours.GmmAligner, attr), property)
        for attr in ("transition_accs", "gmm_accs"):
            self.assertIsInstance(inspect.getattr_static(ours.GmmStatsAccumulator, attr), property)

    def test_without_kalpy(self):
        if importlib.util.find_spec("_kalpy") is not None:
            self.skipTest("_kalpy is installed: MFA would really run")
        p = subprocess.run([sys.executable, "-m", "kaldi_gpu_align.mfa", "version"],
                           capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=str(HERE.parent)))
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("_kalpy", p.stderr)


def main():
    prog = unittest.main(exit=False, verbosity=2)
    return 0 if prog.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
