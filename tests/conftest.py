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
    onnxruntime and numpy from PyPI, made once per session (one per version),
    with the extra pins installed into it too."""
    def make(version, *extra):
        env = tmp_path_factory.getbasetemp() / f"ort-{version}"
        python = env / "bin" / "python"
        packages = list(extra)
        if not python.exists():
            venv.create(env, with_pip=True)
            packages += [f"onnxruntime=={version}", "numpy<2.3"]
        if packages:
            subprocess.run([python, "-m", "pip", "install", "--quiet", *packages],
                           check=True, capture_output=True)
        return python
    return make
