"""The C++ host runs the exported model: its printed outputs equal the reference."""

import subprocess

import numpy as np
from conftest import BUILD, LIBRARY, MODELS

from reference import exported_model


def test_host_runs_the_model():
    done = subprocess.run([str(BUILD / "host"), str(MODELS["dynamo"]), str(LIBRARY)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    printed = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()}
    # The inputs host/main.cc feeds.
    total, argmax = exported_model(np.arange(12, dtype=np.float32).reshape(3, 4),
                                   np.array([1.0, -1.0, 2.0, 0.5], np.float32))
    np.testing.assert_allclose(np.float32(printed["sum"]), total, rtol=1e-6)
    assert printed["argmax"] == [str(i) for i in argmax]


def test_host_names_a_missing_library():
    done = subprocess.run([str(BUILD / "host"), str(MODELS["dynamo"]), "no_such_library.so"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stderr.startswith("host: ") and "no_such_library.so" in done.stderr

