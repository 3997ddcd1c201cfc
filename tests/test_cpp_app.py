"""The C++ application examples/cpp (build/cpp/run_model, built by `make cpp`,
which `make test` runs first): no Python at run time, outputs bit for bit
equal to the Python onnxruntime's, and one clear line for every bad input.

Each model runs twice in C++: with our library registered from its file
(--library) and with the same kernels compiled into the program (--builtin).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from customops.builder import IR_VERSION, single_node_model
from customops.ort import library_path, session
from helpers import empty_name_cases, random_clouds
from optable import OPS

ROOT = Path(__file__).resolve().parent.parent
# CUSTOMOPS_RUN_MODEL: another build of it (e.g. with sanitizers) to test instead
RUN_MODEL = Path(os.environ.get("CUSTOMOPS_RUN_MODEL", ROOT / "build" / "cpp" / "run_model"))
MODES = {"library": ["--library"], "builtin": ["--builtin"]}


@pytest.fixture(scope="module")
def app():
    assert RUN_MODEL.is_file(), f"{RUN_MODEL} is missing: build it with `make cpp`"
    return RUN_MODEL


def run_app(app, *args, env=None):
    """Runs the program; a crash (negative status: a signal) fails the test."""
    done = subprocess.run([str(app), *map(str, args)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode >= 0, f"killed by signal {-done.returncode}\n{done.stderr}"
    return done


def mode_args(mode):
    return [*MODES[mode], library_path()] if mode == "library" else MODES[mode]


def save_inputs(folder: Path, inputs: dict) -> list[str]:
    args = []
    for name, array in inputs.items():
        path = folder / f"in_{name}.npy"
        np.save(path, array)
        args.append(f"{name}={path}")
    return args


def run_both(app, tmp_path, model: onnx.ModelProto, inputs: dict, mode: str):
    """Runs the model in Python onnxruntime and in run_model; returns both."""
    model_path = tmp_path / "model.onnx"
    onnx.save(model, model_path)
    sess = session(model_path)
    expected = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, inputs)))
    out = tmp_path / "out"
    done = run_app(app, *mode_args(mode), model_path, *save_inputs(tmp_path, inputs),
                   "--out", out)
    assert done.returncode == 0, done.stderr
    got = {name: np.load(out / f"{name}.npy") for name in expected}
    printed = [f"{name}: {a.dtype} {tuple(a.shape)}" for name, a in expected.items()]
    assert done.stdout.splitlines() == printed
    return expected, got


def assert_bitwise_equal(expected: dict, got: dict):
    for name, e in expected.items():
        g = got[name]
        assert (g.dtype, g.shape) == (e.dtype, e.shape), name
        assert g.tobytes() == e.tobytes(), f"{name}: {np.abs(g - e).max()}"


def single_node_cases():
    rng = np.random.default_rng(5)
    a, b = (rng.standard_normal((4, 5), dtype=np.float32) for _ in range(2))
    xyz, offset = random_clouds(rng, [30, 0, 17])
    new_xyz, new_offset = random_clouds(rng, [6, 3, 5])
    x = rng.standard_normal((2, 4, 6, 5), dtype=np.float32)
    weight = rng.standard_normal((6, 2, 3, 3), dtype=np.float32)
    off = 2 * rng.standard_normal((2, 2 * 9, 6, 5), dtype=np.float32)
    mask = rng.random((2, 9, 6, 5), dtype=np.float32)
    bias = rng.standard_normal(6, dtype=np.float32)
    conv = dict(stride=[1, 1], padding=[1, 1], dilation=[1, 1], groups=2, offset_groups=1)
    return {
        "my_add": (single_node_model("my_add", {"a": a, "b": b}, ["out"]), {"a": a, "b": b}),
        "knnquery": (single_node_model("knnquery", {"xyz": xyz, "offset": offset},
                                       ["idx", "dist"], nsample=8),
                     {"xyz": xyz, "offset": offset}),
        "knnquery_queries": (single_node_model(
            "knnquery", {"xyz": xyz, "offset": offset, "new_xyz": new_xyz,
                         "new_offset": new_offset}, ["idx", "dist"], nsample=40),
            {"xyz": xyz, "offset": offset, "new_xyz": new_xyz, "new_offset": new_offset}),
        "deform_conv2d": (single_node_model(
            "deform_conv2d", {"input": x, "weight": weight, "offset": off, "mask": mask,
                              "bias": bias}, ["y"], **conv),
            {"input": x, "weight": weight, "offset": off, "mask": mask, "bias": bias}),
        # bias given, mask skipped: the node the lite API cannot run
        "deform_conv2d_nomask": (single_node_model(
            "deform_conv2d", {"input": x, "weight": weight, "offset": off, "mask": None,
                              "bias": bias}, ["y"], **conv),
            {"input": x, "weight": weight, "offset": off, "bias": bias}),
    }


SINGLE = single_node_cases()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", SINGLE)
def test_single_node_models_match_python_bit_for_bit(app, tmp_path, case, mode):
    model, inputs = SINGLE[case]
    assert_bitwise_equal(*run_both(app, tmp_path, model, inputs, mode))


@pytest.fixture(scope="module")
def exported_models():
    """The ops exported from PyTorch by both exporters, as the notebooks do
    (the cases of tests/test_deploy.py)."""
    import torch
    from exporting import export
    from test_deploy import cases

    models, t = cases()
    found = {}
    for name, (module, inputs) in models.items():
        args = tuple(t(a) for a in inputs.values())
        for dynamo in (True, False):
            kwargs = {} if dynamo else {"input_names": list(inputs)}
            with torch.no_grad():
                model = export(module, args, dynamo=dynamo, **kwargs)
            found[f"{name}_{'dynamo' if dynamo else 'torchscript'}"] = (model, inputs)
    return found


@pytest.mark.parametrize("mode", MODES)
def test_exported_models_match_python_bit_for_bit(app, tmp_path, exported_models, mode):
    for name, (model, inputs) in exported_models.items():
        folder = tmp_path / name
        folder.mkdir()
        names = [i.name for i in model.graph.input]
        feeds = dict(zip(names, inputs.values()))
        assert_bitwise_equal(*run_both(app, folder, model, feeds, mode))


def identity_model(arrays: dict) -> onnx.ModelProto:
    nodes = [helper.make_node("Identity", [name], [f"{name}_out"]) for name in arrays]
    inputs = [helper.make_tensor_value_info(
        name, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
        for name, a in arrays.items()]
    outputs = [helper.make_tensor_value_info(f"{name}_out", i.type.tensor_type.elem_type, None)
               for name, i in zip(arrays, inputs)]
    graph = helper.make_graph(nodes, "identity", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)],
                             ir_version=IR_VERSION)


def test_npy_round_trip_of_every_dtype(app, tmp_path):
    """np.load reads back exactly what np.save wrote, for each dtype,
    scalars, empty arrays and 3-D arrays (NaN, -0.0 and inf included)."""
    rng = np.random.default_rng(1)
    floats = np.array([np.nan, -0.0, np.inf, -np.inf, 1.5, 65504])
    arrays = {
        "f16": floats.astype(np.float16).reshape(2, 3),
        "f32": rng.standard_normal((2, 3, 4)).astype(np.float32),
        "f64": floats.reshape(3, 2),
        "i8": np.array([-128, 127], np.int8), "i16": np.array([-3, 7], np.int16),
        "i32": np.array(7, np.int32), "i64": np.array([[-(2**62), 2**62]], np.int64),
        "u8": np.arange(5, dtype=np.uint8), "u16": np.array([65535], np.uint16),
        "u32": np.array([2**32 - 1], np.uint32), "u64": np.array([2**64 - 1], np.uint64),
        "flags": np.array([True, False, True]), "empty": np.zeros((0, 3), np.float32),
    }
    model_path = tmp_path / "identity.onnx"
    onnx.save(identity_model(arrays), model_path)
    done = run_app(app, model_path, *save_inputs(tmp_path, arrays), "--out", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    for name, array in arrays.items():
        back = np.load(tmp_path / "out" / f"{name}_out.npy")
        assert back.dtype == array.dtype and back.shape == array.shape, name
        assert back.tobytes() == array.tobytes(), name


def test_runs_without_ld_library_path(app):
    """The wheel's libonnxruntime.so.1.31.1 is found through the SONAME link
    beside the program and an $ORIGIN rpath."""
    dynamic = subprocess.run(["readelf", "-d", str(app)], capture_output=True, text=True).stdout
    assert "[libonnxruntime.so.1]" in dynamic and "[$ORIGIN]" in dynamic, dynamic
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    done = run_app(app, "--help", env=env)
    assert done.returncode == 0 and done.stdout.startswith("usage: run_model"), done.stderr
    ldd = subprocess.run(["ldd", str(app)], capture_output=True, text=True, env=env).stdout
    assert "libonnxruntime.so.1 => " + str(app.parent) in ldd, ldd


# --- bad input: one line on stderr, exit status 1 (2 for the command line) ---

@pytest.fixture
def my_add_files(tmp_path):
    a = np.ones((2, 3), np.float32)
    model = tmp_path / "my_add.onnx"
    onnx.save(single_node_model("my_add", {"a": a, "b": a}, ["out"]), model)
    np.save(tmp_path / "a.npy", a)
    return tmp_path, model


def npy_bytes(header: str, data: bytes) -> bytes:
    header = header + " " * (117 - len(header)) + "\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + data


def corrupt_npy_cases():
    good = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
    data = np.ones((2, 3), np.float32).tobytes()
    return {
        "text": (b"not numpy at all", "not a .npy file"),
        "truncated data": (npy_bytes(good, data[:-4]), "holds 20 data bytes, its header (float32 (2, 3)) says 24"),
        "trailing data": (npy_bytes(good, data + b"\0"), "holds 25 data bytes"),
        "big endian": (npy_bytes(good.replace("<f4", ">f4"), data), "unsupported dtype '>f4'"),
        "complex": (npy_bytes(good.replace("<f4", "<c8"), data * 2), "unsupported dtype '<c8'"),
        "fortran": (npy_bytes(good.replace("False", "True"), data), "Fortran-order"),
        "bad header": (npy_bytes("{'descr': '<f4', 'shape': (2, 3), }", data),
                       "needs the keys descr, fortran_order and shape"),
        "negative dim": (npy_bytes(good.replace("(2, 3)", "(-2, 3)"), data),
                         "shape must be a tuple of non-negative integers"),
        "huge shape": (npy_bytes(good.replace("(2, 3)", "(4611686018427387904, 8)"), data),
                       "is too large"),
        "unterminated": (npy_bytes("{'descr': '<f4", b""), "unterminated string"),
        "bool byte": (npy_bytes(good.replace("<f4", "|b1").replace("(2, 3)", "(2,)"), b"\0\2"),
                      "bool data holds a byte other than 0 or 1"),
    }


CORRUPT_NPY = corrupt_npy_cases()


def assert_one_line_error(done, *fragments, status=1):
    lines = done.stderr.strip().splitlines()
    assert done.returncode == status, (done.returncode, done.stderr)
    assert lines and lines[0].startswith("run_model: error: "), done.stderr
    assert len(lines) == (2 if status == 2 else 1), done.stderr  # status 2 adds the usage
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.mark.parametrize("case", CORRUPT_NPY)
def test_corrupt_npy_is_refused(app, my_add_files, case):
    folder, model = my_add_files
    content, message = CORRUPT_NPY[case]
    (folder / "bad.npy").write_bytes(content)
    done = run_app(app, "--builtin", model, f"a={folder / 'a.npy'}", f"b={folder / 'bad.npy'}",
                   "--out", folder / "out")
    assert_one_line_error(done, str(folder / "bad.npy"), message)


def test_bad_inputs_each_get_one_clear_line(app, my_add_files):
    folder, model = my_add_files
    a = f"a={folder / 'a.npy'}"
    out = ["--out", folder / "out"]
    np.save(folder / "f64.npy", np.ones((2, 3)))
    np.save(folder / "rank1.npy", np.ones(6, np.float32))
    (folder / "corrupt.onnx").write_bytes(b"\x08\x07garbage" * 10)
    (folder / "a_file").write_text("")
    (folder / "not_a_library.so").write_text("")
    lib = ["--library", library_path()]
    cases = [
        ([folder / "none.onnx", a, *out], ["model not found", "none.onnx"]),
        ([*lib, folder / "corrupt.onnx", a, *out], ["cannot load model", "corrupt.onnx"]),
        ([*lib, model, a, f"b={folder / 'none.npy'}", *out], ["none.npy: cannot open"]),
        ([*lib, model, a, f"x={folder / 'a.npy'}", *out],
         ["unknown input 'x'", "the model's inputs are: a, b"]),
        ([*lib, model, a, *out], ["missing input 'b'", "float32 (?, ?)"]),
        ([*lib, model, a, a, f"b={folder / 'a.npy'}", *out], ["input 'a' given twice"]),
        ([*lib, model, a, f"b={folder / 'f64.npy'}", *out],
         ["input 'b' expects float32", "f64.npy holds float64"]),
        ([*lib, model, a, f"b={folder / 'rank1.npy'}", *out],
         ["input 'b' expects shape (?, ?) (rank 2)", "rank1.npy has shape (6,)"]),
        ([model, a, a.replace("a=", "b="), *out],
         ["custom:my_add", "no registered library provides this op"]),
        ([*lib, model, a, a.replace("a=", "b="), "--out", folder / "a_file"],
         ["cannot use output directory", "a_file"]),
        ([*lib, model, a, a.replace("a=", "b="), "--out", folder / "a_file" / "sub"],
         ["cannot use output directory", "Not a directory"]),
        (["--library", folder / "none.so", model, *out], ["custom-op library not found"]),
        (["--library", folder / "not_a_library.so", model, *out],
         ["cannot load custom-op library", "not_a_library.so"]),
    ]
    for args, fragments in cases:
        assert_one_line_error(run_app(app, *args), *fragments)
    assert not (folder / "out").exists()  # nothing ran, nothing was written


def test_kernel_errors_are_reported_not_crashed(app, tmp_path):
    """An argument error inside our kernel (offsets that go down) comes back
    as ORT's INVALID_ARGUMENT status, with the kernel's message."""
    xyz, _ = random_clouds(np.random.default_rng(0), [10])
    offset = np.array([6, 4, 10], np.int32)
    model = tmp_path / "knn.onnx"
    onnx.save(single_node_model("knnquery", {"xyz": xyz, "offset": offset}, ["idx", "dist"],
                                nsample=3), model)
    args = save_inputs(tmp_path, {"xyz": xyz, "offset": offset})
    for mode in MODES:
        done = run_app(app, *mode_args(mode), model, *args, "--out", tmp_path / "out")
        assert_one_line_error(done, "run failed", "knn_query", "offset")


def test_colliding_output_file_names_are_numbered(app, tmp_path):
    """Outputs named a/b, a_b, a:b and a_b-2 would all be written as a_b.npy
    (or overwrite a_b-2.npy): each gets its own file, and the program prints
    which, so nothing is silently overwritten."""
    x = np.arange(4, dtype=np.float32)
    outputs = {"a/b": 1, "a_b": 2, "a:b": 3, "a_b-2": 4}
    constants = [helper.make_node("Constant", [], [f"c{i}"], value=helper.make_tensor(
        f"c{i}", onnx.TensorProto.FLOAT, [], [float(v)])) for i, v in enumerate(outputs.values())]
    nodes = [*constants, *(helper.make_node("Mul", ["x", f"c{i}"], [name])
                           for i, name in enumerate(outputs))]
    graph = helper.make_graph(
        nodes, "collide", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, [4]) for name in outputs])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)],
                                ir_version=IR_VERSION), tmp_path / "collide.onnx")
    done = run_app(app, tmp_path / "collide.onnx", *save_inputs(tmp_path, {"x": x}),
                   "--out", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "a/b: float32 (4,) -> a_b.npy", "a_b: float32 (4,) -> a_b-3.npy",
        "a:b: float32 (4,) -> a_b-4.npy", "a_b-2: float32 (4,)"]
    files = {"a_b": 1, "a_b-3": 2, "a_b-4": 3, "a_b-2": 4}
    assert sorted(p.stem for p in (tmp_path / "out").iterdir()) == sorted(files)
    for stem, factor in files.items():
        np.testing.assert_array_equal(np.load(tmp_path / "out" / f"{stem}.npy"), factor * x)


def test_directory_given_as_npy_is_named(app, my_add_files):
    folder, model = my_add_files
    (folder / "dir.npy").mkdir()
    done = run_app(app, "--builtin", model, f"a={folder / 'a.npy'}", f"b={folder / 'dir.npy'}",
                   "--out", folder / "out")
    assert_one_line_error(done, f"{folder / 'dir.npy'}: is a directory, not a .npy file")
    assert done.stderr.startswith(f"run_model: error: {folder / 'dir.npy'}: ")


EMPTY_NAMES = empty_name_cases(OPS.values())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", EMPTY_NAMES)
def test_empty_required_names_are_refused_at_load(app, tmp_path, case, mode):
    """A node leaving a required input or an output out is refused when the
    model loads, with ORT's message (my_add segfaulted here, see
    tests/test_errors.py)."""
    model, inputs = EMPTY_NAMES[case]
    onnx.save(model, tmp_path / "model.onnx")
    done = run_app(app, *mode_args(mode), tmp_path / "model.onnx",
                   *save_inputs(tmp_path, inputs), "--out", tmp_path / "out")
    assert_one_line_error(done, "cannot load model", "is marked single but has an empty string")


def test_command_line_errors(app, my_add_files):
    folder, model = my_add_files
    for args, fragment in [
        ([], "no model given"),
        ([model], "no output directory given"),
        ([model, "a", "--out", folder], "expected an input as NAME=FILE.npy, got 'a'"),
        ([model, "--frobnicate"], "unknown option --frobnicate"),
        ([model, "--out"], "--out needs a value"),
    ]:
        assert_one_line_error(run_app(app, *args), fragment, status=2)


def test_readme_deploy_commands(app, tmp_path):
    """docs/deploy.md's "Deploy without Python" commands, after `make setup cpp`:
    export with examples/cpp/export_knn.py, run with run_model; the result
    is checked against a brute-force KNN in numpy."""
    import sys
    from helpers import knn_reference

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(library_path()).parent.parent), os.environ.get("PYTHONPATH", "")])}
    export = subprocess.run([sys.executable, str(ROOT / "examples/cpp/export_knn.py"),
                             str(tmp_path)], capture_output=True, text=True, env=env, timeout=600)
    assert export.returncode == 0, export.stderr
    done = run_app(app, "--library", library_path(), tmp_path / "knn_query.onnx",
                   f"xyz={tmp_path / 'xyz.npy'}", f"offset={tmp_path / 'offset.npy'}",
                   "--out", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["idx: int32 (1000, 8)", "dist: float32 (1000, 8)"]
    xyz, offset = np.load(tmp_path / "xyz.npy"), np.load(tmp_path / "offset.npy")
    idx, dist = knn_reference(8, xyz, offset)
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "idx.npy"), idx)
    np.testing.assert_allclose(np.load(tmp_path / "out" / "dist.npy"), dist, rtol=1e-6)
