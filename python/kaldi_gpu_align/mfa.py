"""python -m kaldi_gpu_align.mfa COMMAND [ARGS]: the Montreal Forced Aligner's
command line (`mfa COMMAND ARGS`, MFA 3.x) with alignment and statistics
accumulation done by this package: kaldi_gpu_align.kalpy's GmmAligner and
GmmStatsAccumulator in place of kalpy's.

MFA imports those two classes by name into its modules, so the names are
replaced there (PATCH_TARGETS) before MFA starts its worker processes; the
workers are forked and inherit the replacement (the start method is set to
fork when nothing chose one: Python 3.14 would use forkserver, whose fresh
workers would not). Nothing touches CUDA in MFA's main process: each worker
makes its own aligner, which uses the per-user GPU service when it can (one
warm GPU context shared by all of MFA's jobs).

    python -m kaldi_gpu_align.mfa align CORPUS DICTIONARY MODEL OUTPUT
    python -m kaldi_gpu_align.mfa train CORPUS DICTIONARY MODEL.zip

KALDI_GPU_KALPY_USE_GPU=no|yes|optional|wait chooses the backend (default
optional). MFA itself still needs kalpy-kaldi (it imports _kalpy at start)."""
from __future__ import annotations

import importlib
import multiprocessing
import sys

# (MFA module, name imported from kalpy there, our replacement's name)
PATCH_TARGETS = (
    ("montreal_forced_aligner.alignment.multiprocessing", "GmmAligner", "GmmAligner"),
    ("montreal_forced_aligner.alignment.multiprocessing", "GmmStatsAccumulator",
     "GmmStatsAccumulator"),
    ("montreal_forced_aligner.alignment.base", "GmmAligner", "GmmAligner"),
)


def patch():
    """Replaces kalpy's classes in MFA's modules; returns [(module, name,
    kalpy's class)]. RuntimeError when this MFA does not have them where
    expected (another MFA version)."""
    from . import kalpy as ours
    done = []
    for mod_name, name, ours_name in PATCH_TARGETS:
        mod = importlib.import_module(mod_name)
        old = getattr(mod, name, None)
        if old is None:
            raise RuntimeError(f"{mod_name} has no {name}: an MFA this switch does not know "
                               f"(it was written for MFA 3.4)")
        setattr(mod, name, getattr(ours, ours_name))
        done.append((mod_name, name, old))
    return done


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if multiprocessing.get_start_method(allow_none=True) is None:
        multiprocessing.set_start_method("fork")
    try:
        patch()
        from montreal_forced_aligner.command_line.mfa import mfa_cli
    except ImportError as e:
        sys.exit(f"kaldi_gpu_align.mfa: MFA cannot be imported ({e}); MFA needs kalpy-kaldi "
                 f"and its _kalpy module installed")
    return mfa_cli.main(args=argv, prog_name="python -m kaldi_gpu_align.mfa")


if __name__ == "__main__":
    sys.exit(main())
