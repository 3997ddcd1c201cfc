"""The C++ host runs each exported model (with and without each optional
input): its outputs equal the reference."""

import subprocess

import numpy as np
import pytest
from conftest import BUILD, LIBRARY, MODELS, model_id
from test_torch_op import assert_outputs_equal, expected

from samples import sample
from schema import DTYPES, OUTPUTS


@pytest.mark.parametrize("model", sorted(MODELS), ids=model_id)
def test_host_runs_the_model(rng, model, tmp_path):
    dtype, _, without = model
    arrays = sample(dtype, rng, smallest=3)
    arrays.pop(without, None)
    for name, array in arrays.items():
        np.save(tmp_path / f"{name}.npy", array)
    done = subprocess.run([str(BUILD / "host"), str(MODELS[model]), str(LIBRARY), str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert_outputs_equal([np.load(tmp_path / f"{name}.npy") for name in OUTPUTS], expected(arrays), dtype)


def test_host_names_a_missing_library(tmp_path):
    done = subprocess.run([str(BUILD / "host"), str(MODELS[DTYPES[0], "dynamo", ""]), "no_such_library.so",
                           str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stderr.startswith("host: ") and "no_such_library.so" in done.stderr


def test_host_usage_says_what_dir_holds():
    done = subprocess.run([str(BUILD / "host")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.startswith("usage: host MODEL.onnx LIBRARY.so DIR\n")
    assert "one <input name>.npy per model input" in done.stderr and "DIR/<output name>.npy" in done.stderr
