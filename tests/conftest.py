import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
# tools/ort_venv.py: venvs of other onnxruntime releases, shared with notebook 02
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))


@pytest.fixture
def rng(request):
    # One stream per test, stable across runs and test selection.
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))
