"""What the Python tests need, set up once: the package from this tree on
sys.path, the fixtures' folder (DATA), and numpy and the package imported;
without them a test prints "SKIP: why" and exits 77 (make test's skip)."""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "tests" / "data"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


def require():
    """(numpy, kaldi_gpu_align), or exit 77 after saying which is missing."""
    try:
        import numpy
    except ImportError:
        print(f"SKIP: numpy is not installed for {sys.executable}")
        sys.exit(77)
    try:
        import kaldi_gpu_align
    except ImportError as e:
        print(f"SKIP: kaldi_gpu_align not importable: {e}")
        sys.exit(77)
    return numpy, kaldi_gpu_align
