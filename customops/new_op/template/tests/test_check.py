"""`python -m customops.check` on every exported model, with samples with and
without each optional input, when the course's customops package (with its
check module) is installed in this Python; the project never imports customops."""

import importlib.metadata
import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import LIBRARY, MODELS

from samples import sample
from schema import OPTIONAL


def has_check() -> bool:
    try:
        return importlib.util.find_spec("customops.check") is not None
    except ModuleNotFoundError:  # no customops package at all
        return False


def which_check() -> str:
    """The customops.check this Python runs: whatever customops it imports,
    which need not be the course's copy you think of."""
    try:
        version = importlib.metadata.version("customops")
    except importlib.metadata.PackageNotFoundError:
        version = "no installed distribution"
    directory = Path(importlib.util.find_spec("customops.check").origin).parent
    return f"customops.check from {directory} (customops {version})"


CHECK = which_check() if has_check() else None


@pytest.mark.skipif(not has_check(), reason="customops.check is not installed in this Python")
@pytest.mark.parametrize("dtype, route", sorted(MODELS))
def test_customops_check_passes(rng, dtype, route, tmp_path):
    """The check runs every case in child processes: a crash fails the case it names."""
    samples = []
    for with_optional in [True, False] if OPTIONAL else [True]:
        for largest in (4, 40):
            samples += ["--inputs", str(tmp_path / f"sample{len(samples)}.npz")]
            np.savez(samples[-1], **sample(dtype, rng, with_optional, smallest=2, largest=largest))
    reference = Path(__file__).resolve().parents[1] / "reference.py"
    done = subprocess.run(
        [sys.executable, "-m", "customops.check", str(MODELS[dtype, route]), "--library", str(LIBRARY),
         *samples, "--reference", f"{reference}:exported_model"],
        capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{CHECK} failed:\n" + done.stdout + done.stderr
