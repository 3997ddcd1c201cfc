"""`python -m customops.check` on every exported model (samples with and
without each optional input the model takes) and on every model you put in
models/, when the course's customops package (with its check module) is
installed in this Python; the project never imports customops."""

import importlib.metadata
import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import LIBRARY, MODELS, ROUTES, model_id

from samples import LARGE, sample
from schema import DTYPES, INPUTS, OPTIONAL

ROOT = Path(__file__).resolve().parents[1]
# These checks are of the library or of every float type at once (larger runs each type's
# kernel on the same grown values): they run on the first model, the others skip them.
ONCE = ("larger", "runtimes", "library")
FIRST = (DTYPES[0], ROUTES[0], "")
# Your own models holding the op (the op's input names as graph inputs): checked too.
YOURS = sorted((ROOT / "models").glob("*.onnx"))


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


def check(model, samples, directory, *arguments):
    """Runs the check on ``model`` with ``samples`` (dicts of arrays, saved in
    ``directory``); it runs every case in child processes: a crash fails the case it names."""
    paths = []
    for i, arrays in enumerate(samples):
        paths += ["--inputs", str(directory / f"sample{i}.npz")]
        np.savez(paths[-1], **arrays)
    done = subprocess.run([sys.executable, "-m", "customops.check", str(model), "--library", str(LIBRARY),
                           *paths, *arguments, "--timeout", "600"],  # a hang, even on a loaded machine
                          capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, f"{CHECK} failed:\n" + done.stdout + done.stderr


@pytest.mark.skipif(not has_check(), reason="customops.check is not installed in this Python")
@pytest.mark.parametrize("model", sorted(MODELS), ids=model_id)
def test_customops_check_passes(rng, model, tmp_path):
    dtype, _, without = model
    samples = []
    for with_optional in [True, False] if OPTIONAL and not without else [True]:
        for largest in (4, LARGE):
            samples.append(sample(dtype, rng, with_optional, smallest=2, largest=largest))
            samples[-1].pop(without, None)
    skips = [] if model == FIRST else [a for name in ONCE for a in ("--skip", name)]
    check(MODELS[model], samples, tmp_path, "--reference", f"{ROOT / 'reference.py'}:exported_model", *skips)


if YOURS:  # (none yet: models/README.md says what to put there)
    @pytest.mark.skipif(not has_check(), reason="customops.check is not installed in this Python")
    @pytest.mark.parametrize("path", YOURS, ids=lambda path: path.name)
    def test_customops_check_passes_on_your_model(rng, path, tmp_path):
        """Samples drawn for the op's inputs that the model takes, T the type of its
        first T input; no reference (the model may hold more than the op)."""
        graph = onnx.load(path).graph
        types = {i.name: onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type) for i in graph.input}
        strangers = [name for name in types if name not in INPUTS]
        assert not strangers, f"{path.name}: inputs {strangers} are not inputs of the op ({list(INPUTS)})"
        dtype = next(types[name] for name in types if INPUTS[name][0] == "T").name
        samples = [{k: v for k, v in sample(dtype, rng, largest=largest).items() if k in types}
                   for largest in (4, LARGE)]
        check(path, samples, tmp_path)
