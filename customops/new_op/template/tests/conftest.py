import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import numpy as np
import pytest

from schema import DTYPES, NAME

BUILD = Path(__file__).resolve().parents[1] / "build"  # what `make` builds
LIBRARY = BUILD / f"lib{NAME}_ort.so"
ROUTES = ("dynamo", "legacy")
MODELS = {(dtype, route): BUILD / f"{NAME}_{dtype}{'_legacy' if route == 'legacy' else ''}.onnx"
          for dtype in DTYPES for route in ROUTES}
CHILD = Path(__file__).resolve().parent / "ort_child.py"


@pytest.fixture
def rng(request):
    """A generator seeded per test, so a failure reproduces alone."""
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


class OrtError(Exception):
    """ORT refused the model (stage "session") or the inputs (stage "run")."""

    def __init__(self, stage, message):
        super().__init__(f"{stage}: {message}")
        self.stage = stage


def run_ort(model, feeds, threads=0, rounds=0, intra_op_threads=0):
    """The outputs of ``model`` (a path or an onnx.ModelProto) with our library
    on ``feeds`` (a dict of arrays; with ``threads``, a list of them, run
    concurrently), in a child process: a crash of the library fails this one
    case, naming its signal, and the test run goes on.  ``intra_op_threads``:
    the session's pool, which the math's parallel_for runs on (0: ORT's default)."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if not isinstance(model, (str, Path)):
            (tmp / "model.onnx").write_bytes(model.SerializeToString())
            model = tmp / "model.onnx"
        for i, feed in enumerate(feeds if threads else [feeds]):
            np.savez(tmp / f"in{i}.npz", **feed)
        done = subprocess.run([sys.executable, str(CHILD), str(model), str(LIBRARY), str(tmp),
                               str(threads), str(rounds), str(intra_op_threads)],
                              capture_output=True, text=True, timeout=300)
        if done.returncode < 0:
            pytest.fail(f"onnxruntime died of signal {-done.returncode} running {Path(model).name} "
                        f"with {LIBRARY.name}: {done.stderr[-2000:]}", pytrace=False)
        if done.returncode != 0:
            stage, _, message = done.stderr.strip().splitlines()[-1].partition(": ")
            raise OrtError(stage, message)
        if threads:
            return done.stdout
        with np.load(tmp / "out0.npz") as outputs:
            return [outputs[f"arr_{i}"] for i in range(len(outputs.files))]
