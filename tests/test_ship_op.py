"""examples/ship_op (notebook 19 builds its wheel and runs it in another torch):
the guard of its setup.py."""

import os
import subprocess
import sys
from pathlib import Path

SHIP = Path(__file__).resolve().parent.parent / "examples" / "ship_op"


def test_setup_without_the_ort_headers_says_how_to_get_them_in_one_line():
    env = {k: v for k, v in os.environ.items() if k != "ORT_INCLUDE_DIR"}
    done = subprocess.run([sys.executable, "setup.py", "--version"], cwd=SHIP, capture_output=True,
                          text=True, env=env)
    assert done.returncode == 1 and done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert "set ORT_INCLUDE_DIR to a directory holding onnxruntime_cxx_api.h" in done.stderr
    assert "$(python -m customops.headers)" in done.stderr


def test_the_ort_library_passes_customops_check(tmp_path):
    """The course's shipped example passes the course's own checker: its ORT op
    is on the classic API, so a node with an input named "" is refused at load
    (the lite API's every-input-optional let it through and crashed)."""
    import numpy as np
    from onnx import TensorProto, helper, save

    from customops import check, headers

    library = tmp_path / "libgeo_ort.so"
    subprocess.run(["g++", "-std=c++17", "-O2", "-shared", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra",
                    "-Werror", f"-I{headers.include_dir()}", f"-Wl,--version-script={SHIP / 'csrc/ort_op.map'}",
                    str(SHIP / "csrc/ort_op.cc"), "-o", str(library)], check=True, timeout=600)
    graph = helper.make_graph(
        [helper.make_node("sq_dist", ["a", "b"], ["out"], domain="geo")], "sq_dist",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n", "d"]) for n in "ab"],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["n"])])
    save(helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 19),
                                                                helper.make_opsetid("geo", 1)]),
         tmp_path / "sq_dist.onnx")
    rng = np.random.default_rng(19)
    samples = [{n: rng.standard_normal((rows, 3), dtype=np.float32) for n in "ab"} for rows in (5, 2000)]
    records = check.run(tmp_path / "sq_dist.onnx", [library], samples,
                        reference=lambda a, b: ((a - b) ** 2).sum(axis=1), runtimes_python=[])
    failed = [r for r in records if r["ok"] is False]
    assert not failed, failed
    omitted = next(r for r in records if r["name"] == "omitted")
    assert omitted["ok"] is True, omitted
