"""The planted bugs of mutants/ (`make mutants` runs them: too slow for CI,
about 75 s of build per C++ mutant).  Here only what keeps them usable: every
patch still applies to the code and names test files that exist, and every
layer has its mutants."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The layers (mutants/README.md): a mutant's file name starts with its layer.
LAYERS = ("kernel", "vector", "binding", "default", "fake", "autograd", "translation",
          "symbolic", "doctor")


def test_every_mutant_still_applies():
    done = subprocess.run([sys.executable, "tools/mutants.py", "--check"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.startswith("mutants: all "), done.stdout


def test_every_layer_has_mutants():
    names = [p.stem for p in (ROOT / "mutants").glob("*.patch")]
    assert len(names) >= 25
    assert {n.split("-")[0] for n in names} == set(LAYERS), names
