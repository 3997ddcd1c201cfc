"""The planted bugs of mutants/ (`make mutants` runs them: too slow for CI,
about 75 s of build per C++ mutant).  Here only what keeps them usable: every
patch still applies to the code and names test files that exist, and every
layer has its mutants."""

import shutil
import subprocess
import sys
from pathlib import Path

import mutants as tool  # tools/mutants.py

ROOT = Path(__file__).resolve().parent.parent

# The layers (mutants/README.md): a mutant's file name starts with its layer.
LAYERS = ("kernel", "vector", "binding", "default", "fake", "autograd", "translation",
          "symbolic", "doctor", "check")


def test_every_mutant_still_applies():
    done = subprocess.run([sys.executable, "tools/mutants.py", "--check"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.startswith("mutants: all "), done.stdout


def test_every_layer_has_mutants():
    names = [p.stem for p in (ROOT / "mutants").glob("*.patch")]
    assert len(names) >= 25
    assert {n.split("-")[0] for n in names} == set(LAYERS), names


def test_a_mutant_changes_the_copy_inside_the_work_tree():
    """The copy lives under build/, inside this repository's work tree, where
    a plain `git apply` silently skips every file (it patches only below its
    directory, relative to the repository's top): every Python mutant passed
    every test that way.  The tool's apply must change the copy's file."""
    mutant = tool.parse(ROOT / "mutants" / "fake-deform-dtype.patch")
    copy = ROOT / "build" / "test-mutants-apply"
    shutil.rmtree(copy, ignore_errors=True)
    (copy / "customops").mkdir(parents=True)
    try:
        shutil.copy(ROOT / "customops" / "ops.py", copy / "customops" / "ops.py")
        assert tool.git_apply(mutant, copy).returncode == 0
        assert (copy / "customops" / "ops.py").read_text() != (ROOT / "customops" / "ops.py").read_text()
    finally:
        shutil.rmtree(copy)
