"""`python -m customops.check` on the exported model, when the course's
customops package (with its check module) is installed in this Python; the
project itself never imports customops."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import LIBRARY, MODELS


def has_check() -> bool:
    try:
        return importlib.util.find_spec("customops.check") is not None
    except ModuleNotFoundError:  # no customops package at all
        return False


@pytest.mark.skipif(not has_check(), reason="customops.check is not installed in this Python")
@pytest.mark.parametrize("route", sorted(MODELS))
def test_customops_check_passes(rng, route, tmp_path):
    inputs = tmp_path / "sample.npz"
    np.savez(inputs, x=rng.standard_normal((9, 4), dtype=np.float32), weight=rng.standard_normal(4, dtype=np.float32))
    reference = Path(__file__).resolve().parents[1] / "reference.py"
    done = subprocess.run(
        [sys.executable, "-m", "customops.check", str(MODELS[route]), "--library", str(LIBRARY),
         "--inputs", str(inputs), "--reference", f"{reference}:exported_model"],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
