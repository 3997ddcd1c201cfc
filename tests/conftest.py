import subprocess
import sys
import venv
import zlib
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def rng(request):
    # One stream per test, stable across runs and test selection.
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


@pytest.fixture(scope="session")
def runtime(tmp_path_factory):
    """runtime("1.24.4", *extra_pins) -> the python of a venv with that
    onnxruntime, numpy and the extra pins from PyPI, made once per session."""
    def make(version, *extra):
        name = "-".join([f"ort-{version}", *extra]).replace("=", "")
        env = tmp_path_factory.getbasetemp() / name
        python = env / "bin" / "python"
        if not python.exists():
            venv.create(env, with_pip=True)
            subprocess.run([python, "-m", "pip", "install", "--quiet", f"onnxruntime=={version}",
                            "numpy<2.3", *extra], check=True, capture_output=True)
        return python
    return make
