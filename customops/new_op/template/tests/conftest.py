import json
import signal
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import numpy as np
import pytest

from schema import DTYPES, NAME, WITHOUT, model_file

BUILD = Path(__file__).resolve().parents[1] / "build"  # what `make` builds
LIBRARY = BUILD / f"lib{NAME}_ort.so"
ROUTES = ("dynamo", "legacy")
# Every model export.py writes, by (dtype, route, the optional input it goes without or "").
MODELS = {(dtype, route, without): BUILD / model_file(dtype, route, without)
          for dtype in DTYPES for route in ROUTES for without in WITHOUT}
CHILD = Path(__file__).resolve().parent / "ort_child.py"
TORCH_CHILD = Path(__file__).resolve().parent / "torch_child.py"


def model_id(key):
    """A model's test id: float32-dynamo, float32-legacy-without_weight, ..."""
    dtype, route, without = key
    return f"{dtype}-{route}" + (f"-without_{without}" if without else "")


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


class Crash(AssertionError):
    """The PyTorch op's process died of a signal."""


class TorchOp:
    """The PyTorch op, run by one child process (torch_child.py) for the whole
    test run, each call in a process of its own: a crash of the math fails the
    case that hit it, naming its signal, and the run goes on.  The op's
    exceptions are raised here with their type (ValueError, RuntimeError) and message."""

    def __init__(self):
        self.process = None

    def request(self, request, arrays, attributes):
        if self.process is None or self.process.poll() is not None:
            self.process = subprocess.Popen([sys.executable, str(TORCH_CHILD)], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, text=True, cwd=TORCH_CHILD.parents[1])
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            np.savez(tmp / "in.npz", **{k: v for k, v in arrays.items() if v is not None})
            (tmp / "attributes.json").write_text(json.dumps(attributes))
            self.process.stdin.write(f"{request} {tmp}\n")
            self.process.stdin.flush()
            answer = self.process.stdout.readline().strip()
            if not answer:
                pytest.fail("tests/torch_child.py died: its messages are above", pytrace=False)
            if answer.startswith("crash "):  # an exception, so that Hypothesis shrinks it and prints its notes
                number = int(answer.split()[1])
                raise Crash(f"the PyTorch op died of signal {number} ({signal.Signals(number).name}) on inputs of "
                            f"shapes { {k: v.shape for k, v in arrays.items() if v is not None} }, "
                            f"attributes {attributes}")
            if answer.startswith("error "):
                kind, _, message = answer[6:].partition(": ")
                raise {"ValueError": ValueError, "IndexError": IndexError}.get(kind, RuntimeError)(message)
            if request == "call":
                with np.load(tmp / "out.npz") as outputs:
                    return [outputs[f"arr_{i}"] for i in range(len(outputs.files))]

    def close(self):
        if self.process is not None:
            self.process.stdin.close()
            self.process.wait()


torch_op = TorchOp()


def pytest_sessionfinish(session):
    torch_op.close()
