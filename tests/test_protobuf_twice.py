"""Notebook 23, section 3: two libraries that each compiled onnx's generated
onnx-ml.pb.cc against one shared libprotobuf abort the process that loads
both ("File already exists in database: onnx/onnx-ml.proto"); generated for
the lite runtime, as the onnx wheel's own .proto asks, they load side by side.

Needs protoc and the shared libprotobuf with its headers (Debian:
protobuf-compiler, libprotobuf-dev), which `make test` installs; without them
the test fails and says what to install."""

import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

LIBRARY = """
#include "onnx/onnx-ml.pb.h"
extern "C" int default_ir_version() { return onnx::ModelProto().ir_version(); }
"""
LITE = "option optimize_for = LITE_RUNTIME;"
LOAD_BOTH = "import ctypes, sys; [ctypes.CDLL(path) for path in sys.argv[1:]]; print('both loaded')"


def two_copies(directory: Path, lite: bool) -> list[str]:
    """Two files of one library carrying onnx-ml.pb.cc, built against the shared libprotobuf."""
    proto = (Path(onnx.__file__).parent / "onnx-ml.proto").read_text()
    assert LITE in proto  # the wheel's file asks for the lite runtime; onnx's CMake default is the full one
    (directory / "onnx").mkdir()
    (directory / "onnx" / "onnx-ml.proto").write_text(proto if lite else proto.replace(LITE, ""))
    (directory / "library.cc").write_text(LIBRARY)
    subprocess.run(["protoc", "-I.", "--cpp_out=.", "onnx/onnx-ml.proto"], cwd=directory, check=True)
    subprocess.run(["g++", "-std=c++17", "-O0", "-shared", "-fPIC", "-I.", "library.cc", "onnx/onnx-ml.pb.cc",
                    "-lprotobuf", "-o", "liba.so"], cwd=directory, check=True)
    shutil.copy(directory / "liba.so", directory / "libb.so")
    return [str(directory / "liba.so"), str(directory / "libb.so")]


@pytest.fixture(scope="module")
def protobuf():
    assert shutil.which("protoc") and Path("/usr/include/google/protobuf/message.h").is_file(), \
        "needs protoc and libprotobuf's headers: `make test` installs them (apt-get install protobuf-compiler libprotobuf-dev)"


@pytest.mark.parametrize("lite", [False, True], ids=["full runtime", "lite runtime"])
def test_two_copies_of_onnx_ml_pb_cc_in_one_process(protobuf, tmp_path, lite):
    libraries = two_copies(tmp_path, lite)
    done = subprocess.run([sys.executable, "-c", "import onnx; " + LOAD_BOTH, *libraries],
                          capture_output=True, text=True)
    if lite:
        assert done.returncode == 0 and done.stdout == "both loaded\n", done.stderr
    else:
        assert done.returncode == -6 and done.stdout == "", done.stderr  # SIGABRT
        assert "File already exists in database: onnx/onnx-ml.proto" in done.stderr
        assert "CHECK failed: GeneratedDatabase()->Add(encoded_file_descriptor, size)" in done.stderr
