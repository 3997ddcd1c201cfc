import zlib
from pathlib import Path

import numpy as np
import pytest

BUILD = Path(__file__).resolve().parents[1] / "build"  # what `make` builds
LIBRARY = BUILD / "libscaled_row_sum_ort.so"
MODELS = {"dynamo": BUILD / "scaled_row_sum.onnx", "legacy": BUILD / "scaled_row_sum_legacy.onnx"}


@pytest.fixture
def rng(request):
    """A generator seeded per test, so a failure reproduces alone."""
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))
