"""PEP 517 build backend of the kaldi_gpu_align package (pyproject.toml).

build_wheel: the package's Python files, plus libkaldi-gpu-align.so and the
kaldi-gpu-service program: $KALDI_GPU_LIBRARY if set, else built by `make`
in the repository this folder belongs to (KGA_BUILD_MAKE=0: only taken if
already built). A wheel with the library is tagged for this platform; one
without it is pure Python and loads the system's libkaldi-gpu-align.so.1.
Standard library only, so that pip needs nothing from the network.
"""
from __future__ import annotations

import base64
import hashlib
import os
import re
import subprocess
import sysconfig
import tarfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PKG = "kaldi_gpu_align"


def _meta():
    text = (HERE / "pyproject.toml").read_text(encoding="utf-8")
    get = lambda k: re.search(rf'^{k} = "(.*)"$', text, re.M).group(1)  # noqa: E731
    return get("name"), get("version"), get("description"), get("requires-python")


def _native():
    """[(path in the wheel, file)] of the library and the service program."""
    env = os.environ.get("KALDI_GPU_LIBRARY")
    if env:
        return [(f"{PKG}/libkaldi-gpu-align.so", Path(env))]
    if not (ROOT / "Makefile").exists() or not (ROOT / "include" / "kaldi-gpu-align.h").exists():
        return []
    so, svc = ROOT / "build" / "libkaldi-gpu-align.so", ROOT / "gmmbin-gpu" / "kaldi-gpu-service"
    if os.environ.get("KGA_BUILD_MAKE", "1") != "0":
        subprocess.run(["make", "-C", str(ROOT), f"-j{os.cpu_count() or 1}",
                        "build/libkaldi-gpu-align.so", "gmmbin-gpu/kaldi-gpu-service"],
                       check=True)
    files = [(f"{PKG}/libkaldi-gpu-align.so", so)] if so.exists() else []
    if files and svc.exists():
        files.append((f"{PKG}/kaldi-gpu-service", svc))
    return files


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}\n"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name, version, summary, requires_python = _meta()
    native = _native()
    tag = ("py3-none-" + re.sub(r"[-.]", "_", sysconfig.get_platform())) if native \
        else "py3-none-any"
    dist = f"{name.replace('-', '_')}-{version}"
    files = [(f"{PKG}/{p.name}", p) for p in sorted((HERE / PKG).glob("*.py"))] + native
    meta = (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: {summary}\n"
            f"Requires-Python: {requires_python}\nRequires-Dist: numpy\n").encode()
    wheel = (f"Wheel-Version: 1.0\nGenerator: kga_build\nRoot-Is-Purelib: "
             f"{'false' if native else 'true'}\nTag: {tag}\n").encode()
    out = Path(wheel_directory) / f"{dist}-{tag}.whl"
    record = ""
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, path in files:
            data = path.read_bytes()
            info = zipfile.ZipInfo(arc)
            info.external_attr = (0o755 if os.access(path, os.X_OK) else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
            record += _record_line(arc, data)
        for arc, data in ((f"{dist}.dist-info/METADATA", meta),
                          (f"{dist}.dist-info/WHEEL", wheel)):
            z.writestr(arc, data)
            record += _record_line(arc, data)
        record += f"{dist}.dist-info/RECORD,,\n"
        z.writestr(f"{dist}.dist-info/RECORD", record)
    return out.name


def build_sdist(sdist_directory, config_settings=None):
    name, version, _, _ = _meta()
    base = f"{name.replace('-', '_')}-{version}"
    out = Path(sdist_directory) / f"{base}.tar.gz"
    with tarfile.open(out, "w:gz") as t:
        for p in [HERE / "pyproject.toml", HERE / "kga_build.py",
                  *sorted((HERE / PKG).glob("*.py"))]:
            t.add(p, arcname=f"{base}/{p.relative_to(HERE)}")
    return out.name
