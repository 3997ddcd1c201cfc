"""customops.doctor against a corpus of broken models built here, one per
kind of finding, and against the healthy models the project exports.

Each broken model is checked through the command line (exit status, the op
and the fix it names) and, where the fix is mechanical, the fix itself is
applied and the model loaded in plain onnxruntime: the doctor's advice must
work, not just read well.  Expected limits (IR version, opset) come from
ORT's own error messages, not from the doctor.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import customops
from customops import doctor
from customops.doctor import probe
from customops.ort import library_path
from helpers import ort_extensions, single_node_model
from customops.envs import ort_python
from test_deploy import BROKEN_ON_PURPOSE, export_cases

ROOT = Path(__file__).resolve().parent.parent
F32 = np.zeros((4, 3), np.float32)
X4 = np.zeros((1, 4, 3, 3), np.float32)
XYZ, OFFSET = np.zeros((6, 3), np.float32), np.array([6], np.int32)
DEFORM = {"input": np.zeros((1, 2, 5, 5), np.float32), "weight": np.zeros((3, 2, 3, 3), np.float32),
          "offset": np.zeros((1, 18, 3, 3), np.float32)}


def extensions_library() -> str:
    return ort_extensions().get_library_path()


def ort_message(model: onnx.ModelProto, libraries=()) -> str:
    """What plain onnxruntime says about a model ('' if it loads)."""
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4
    try:
        for library in libraries:
            options.register_custom_ops_library(library)
        onnxruntime.InferenceSession(model.SerializeToString(), options)
    except Exception as error:  # noqa: BLE001
        return str(error)
    return ""


# -- the broken models ------------------------------------------------------

def ir_too_high():
    model = single_node_model("my_add", {"a": F32, "b": F32}, ["c"])
    # Above what onnx writes by default (14 in onnx 1.23), which onnxruntime 1.32 reads.
    model.ir_version = onnx.IR_VERSION + 1
    return model


def knn_nsample_input():
    """The seeds' KNNQuery as the TorchScript exporter writes it: nsample as a Constant input."""
    constant = helper.make_node("Constant", [], ["/Constant_output_0"], name="/Constant",
                                value=helper.make_tensor("v", TensorProto.INT64, [], [8]))
    model = single_node_model("knnquery", {"/Constant_output_0": ..., "xyz": XYZ, "offset": OFFSET},
                              ["idx", "dist"], extra_nodes=[constant])
    model.graph.node[-1].name = "/knnquery"
    return model


def selu_function(function_opset=14, model_opset=14):
    """The seeds' onnxscript Selu (shortened): a model-local function whose
    body uses CastLike while importing opset 14."""
    body = [helper.make_node("Constant", [], ["alpha"],
                             value=helper.make_tensor("alpha", TensorProto.FLOAT, [], [1.67326])),
            helper.make_node("CastLike", ["alpha", "X"], ["alphaX"]),
            helper.make_node("Exp", ["X"], ["e"]),
            helper.make_node("Mul", ["alphaX", "e"], ["Y"])]
    function = helper.make_function("custom-onnx-script", "Selu", ["X"], ["Y"], body,
                                    [helper.make_opsetid("", function_opset)])
    node = helper.make_node("Selu", ["x"], ["y"], domain="custom-onnx-script", name="/Selu")
    graph = helper.make_graph(
        [node], "selu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "n"])])
    return helper.make_model(graph, functions=[function], ir_version=8, opset_imports=[
        helper.make_opsetid("", model_opset), helper.make_opsetid("custom-onnx-script", 1)])


def shapes_clash():
    """Every node loads on its own; together their static shapes cannot broadcast."""
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"], name="add"),
         helper.make_node("Relu", ["c"], ["d"], name="relu")], "clash",
        [value("a", TensorProto.FLOAT, [2, 3]), value("b", TensorProto.FLOAT, [4, 5])],
        [value("d", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def typed_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its graph outputs typed by ORT (so no missing-type warning)."""
    options = onnxruntime.SessionOptions()
    options.register_custom_ops_library(library_path())
    session = onnxruntime.InferenceSession(model.SerializeToString(), options)
    del model.graph.output[:]
    for out in session.get_outputs():
        elem = TensorProto.DataType.Value(out.type[7:-1].upper())
        model.graph.output.append(helper.make_tensor_value_info(out.name, elem, out.shape))
    return model


OURS = "ours"  # stands for [library_path()] in the table (resolved at run time)

# name: (model, libraries, exit status, finding kind, op, what the fix must say)
CORPUS = {
    "ir-version": (ir_too_high, OURS, 1, "ir-version", None, "model.ir_version = {max_ir}"),
    "opset": (lambda: single_node_model("Relu", {"x": F32}, ["y"], domain="", opset=30), (), 1,
              "opset", None, "export with opset {max_opset}"),
    "unresolved-ours": (lambda: single_node_model("deform_conv2d", DEFORM, ["y"]), (), 1,
                        "unresolved-op", "custom::deform_conv2d",
                        "options.register_custom_ops_library(customops.ort.library_path())"),
    "unresolved-extensions": (
        lambda: single_node_model("StringRegexReplace", {"s": np.array(["a"]), "p": np.array(["a"]),
                                                         "r": np.array(["b"])}, ["o"],
                                  domain="ai.onnx.contrib"), (), 1, "unresolved-op",
        "ai.onnx.contrib::StringRegexReplace",
        "options.register_custom_ops_library(onnxruntime_extensions.get_library_path())"),
    "unresolved-unknown": (lambda: single_node_model("nosuchop", {"x": F32}, ["y"]), OURS, 1,
                           "unresolved-op", "custom::nosuchop", "write its kernel"),
    "input-type": (lambda: single_node_model("knnquery", {"xyz": XYZ.astype(np.float64),
                                                          "offset": OFFSET}, ["idx", "dist"],
                                             nsample=2), OURS, 1, "input-type", "custom::knnquery",
                   "cast 'xyz' to tensor(float)"),
    "attribute-as-input": (knn_nsample_input, OURS, 1, "attribute-as-input", "custom::knnquery",
                           "nsample=8"),
    "input-count": (lambda: single_node_model("my_add", {"a": F32, "b": F32, "c": F32}, ["y"]),
                    OURS, 1, "input-count", "custom::my_add", "match the inputs"),
    "kernel-refused": (lambda: single_node_model("knnquery", {"xyz": XYZ, "offset": OFFSET},
                                                 ["idx", "dist"]), OURS, 1, "kernel-refused",
                       "custom::knnquery", "give the node attribute 'nsample'"),
    # ORT 1.31.1 has no int16 Relu kernel although ONNX allows int16 since opset 14.
    "no-kernel": (lambda: single_node_model("Relu", {"x": F32.astype(np.int16)}, ["y"], domain="",
                                            opset=17), (), 1, "no-kernel", "ai.onnx::Relu",
                  "cast the inputs to tensor(float)"),
    "op-not-in-opset": (lambda: single_node_model("Asinh", {"x": F32}, ["y"], domain="", opset=8),
                        (), 1, "op-not-in-opset", "ai.onnx::Asinh", "opset >= 9"),
    "function-opset": (selu_function, (), 1, "function-opset", "custom-onnx-script::Selu",
                       "from onnxscript.onnx_opset import opset15 as op"),
    "missing-output-type": (lambda: single_node_model("knnquery", {"xyz": XYZ, "offset": OFFSET},
                                                      ["idx", "dist"], nsample=2), OURS, 0,
                            "missing-output-type", "custom::knnquery", "torch.onnx.ops.symbolic"),
    # ORT's kernels refuse at session creation; LRN's message names no attribute.
    "kernel-refused-unnamed": (lambda: single_node_model("LRN", {"x": X4}, ["y"], domain="",
                                                         opset=17, size=2), (), 1,
                               "kernel-refused", "ai.onnx::LRN",
                               "give the node what the kernel's message asks for"),
    "kernel-refused-value": (lambda: single_node_model("Resize", {"x": X4, "roi": None,
                                                                  "scales": np.ones(4, np.float32)},
                                                        ["y"], domain="", opset=17, mode="bogus"),
                             (), 1, "kernel-refused", "ai.onnx::Resize",
                             "give the node what the kernel's message asks for"),
    # A refusal no explanation matches (ONNX's own inference: a repeated perm).
    "node": (lambda: single_node_model("Transpose", {"x": F32}, ["y"], domain="", opset=17,
                                       perm=[0, 0]), (), 1, "node", "ai.onnx::Transpose",
             "read ORT's message; run the doctor again after the fix"),
    "load": (shapes_clash, (), 1, "load", None, "it names the node"),
    "library": (lambda: typed_outputs(single_node_model("my_add", {"a": F32, "b": F32}, ["c"])),
                [__file__], 1, "library", None, "check the path"),
}


def run_cli(args, capsys) -> tuple[int, str, str]:
    status = doctor.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize("case", CORPUS)
def test_broken_model(case, tmp_path, capsys):
    build, libraries, status, kind, op, fix = CORPUS[case]
    libraries = [library_path()] if libraries == OURS else list(libraries)
    model = build()
    path = tmp_path / f"{case}.onnx"
    onnx.save(model, path)
    ort_says = ort_message(model, libraries)
    limits = {"max_ir": re.search(r"max supported IR version: (\d+)", ort_says),
              "max_opset": re.search(r"is till opset (\d+)", ort_says)}
    fix = fix.format(**{k: m[1] for k, m in limits.items() if m})

    got, out, err = run_cli([path, *[x for lib in libraries for x in ("--library", lib)]], capsys)
    assert (got, err) == (status, ""), out
    findings = doctor.diagnose(path, libraries).findings
    matching = [f for f in findings if f.kind == kind]
    assert matching, out
    assert op is None or matching[0].op == op, out
    assert fix in matching[0].fix, out
    assert fix in out and (op is None or op in out)
    if status:  # ORT's real message, first line, is quoted for errors
        assert matching[0].ort and matching[0].ort[-40:] in ort_says, out


def test_the_fixes_work():
    """Apply each mechanical fix the doctor prints and load the model in plain ORT."""
    ours = [library_path()]
    model = ir_too_high()
    n = int(re.search(r"model.ir_version = (\d+)", doctor.diagnose(model, ours).errors[0].fix)[1])
    model.ir_version = n
    assert ort_message(model, ours) == ""

    finding = doctor.diagnose(single_node_model("deform_conv2d", DEFORM, ["y"])).errors[0]
    assert "customops.ort.library_path()" in finding.fix
    assert ort_message(single_node_model("deform_conv2d", DEFORM, ["y"]), ours) == ""

    finding = doctor.diagnose(knn_nsample_input(), ours).errors[0]
    name, value = re.search(r"make it an attribute, (\w+)=(\d+)", finding.fix).groups()
    fixed = single_node_model("knnquery", {"xyz": XYZ, "offset": OFFSET}, ["idx", "dist"],
                              **{name: int(value)})
    assert ort_message(fixed, ours) == ""
    assert "/knnquery" in finding.nodes

    finding = doctor.diagnose(selu_function()).errors[0]
    assert "CastLike" in finding.summary and "No Op registered for CastLike" in finding.ort
    assert ort_message(selu_function(15, 15)) == ""
    # The function importing 15 is not enough: ORT inlines it at the model's opset.
    half = doctor.diagnose(selu_function(15, 14))
    assert [f.kind for f in half.errors] == ["function-opset"]
    assert "the model imports ai.onnx 14" in half.errors[0].summary


def test_extensions_op_resolves_with_the_extensions_library():
    model = CORPUS["unresolved-extensions"][0]()
    diagnosis = doctor.diagnose(model, [extensions_library()])
    assert not diagnosis.errors, diagnosis
    assert [f.summary for f in diagnosis.findings if f.kind == "resolved"] == [
        f"resolved by {os.path.basename(extensions_library())}"]


def test_same_domain_library_twice_is_an_error():
    model = CORPUS["missing-output-type"][0]()
    diagnosis = doctor.diagnose(model, [library_path(), library_path()])
    assert [f.kind for f in diagnosis.errors] == ["library"]
    assert "already set in registry" in diagnosis.errors[0].ort


def test_json_output(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(knn_nsample_input(), path)
    status, out, _ = run_cli([path, "--library", library_path(), "--json"], capsys)
    report = json.loads(out)
    assert status == report["exit_status"] == 1
    assert report["onnxruntime"] == onnxruntime.__version__
    kinds = {f["kind"]: f for f in report["findings"]}
    assert kinds["attribute-as-input"]["nodes"] == ["/knnquery"]
    assert kinds["attribute-as-input"]["domain_version"] == 1


def test_report_prints_like_the_cli(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(ir_too_high(), path)
    _, out, _ = run_cli([path], capsys)
    diagnosis = doctor.diagnose(path)
    assert out.rstrip("\n") == str(diagnosis) == repr(diagnosis)  # repr: a notebook's display
    lines = str(diagnosis).splitlines()
    assert lines[1].startswith("error   IR version") and lines[2].startswith("        ORT: ")


def test_model_as_path_bytes_or_proto_alike(tmp_path):
    model = knn_nsample_input()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    found = [[(f.kind, f.op, f.fix) for f in doctor.diagnose(m, [library_path()]).findings]
             for m in (path, model.SerializeToString(), model)]
    assert found[0] == found[1] == found[2]
    assert model == copy  # the caller's ModelProto is left as it was


# -- models that must not get an error ---------------------------------------

@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return [item["model"] for item in export_cases(tmp_path_factory.mktemp("doctor"))]


def _exported_seed(node, inputs, outputs):
    """A model as the TorchScript exporter writes a seed's symbolic (opset 20,
    outputs typed with the dims it invents when it has no shape)."""
    graph = helper.make_graph(node, "main_graph", inputs, outputs)
    return helper.make_model(graph, ir_version=10, opset_imports=[
        helper.make_opsetid("", 20), helper.make_opsetid("custom", 1)])


# The failures notebooks 04 and 05 show on purpose, built here as their exports
# write them (the notebooks print the same nodes and assert the doctor's words).
BROKEN_MODELS = {
    "04_grid_seed.onnx": lambda: _exported_seed(  # the seed's grid symbolic: no kernel has it
        [helper.make_node("torch_cluster_grid", ["pos", "size", "", "end"], ["4"],
                          domain="custom", name="/torch_cluster_grid")],
        [helper.make_tensor_value_info("pos", TensorProto.FLOAT, [40, 3]),
         *(helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in ("size", "end"))],
        [helper.make_tensor_value_info("4", TensorProto.INT64, ["torch_cluster_grid4_dim_0"])]),
    "05_knn_seed.onnx": lambda: _exported_seed(  # the seed's KNNQuery: nsample as a tensor input
        [helper.make_node("Constant", [], ["/Constant_output_0"], name="/Constant",
                          value=numpy_helper.from_array(np.array(8, np.int64))),
         helper.make_node("knnquery", ["/Constant_output_0", "xyz", "offset"], ["idx", "dist"],
                          domain="custom", name="/knnquery")],
        [helper.make_tensor_value_info("xyz", TensorProto.FLOAT, [92, 3]),
         helper.make_tensor_value_info("offset", TensorProto.INT32, [3])],
        [helper.make_tensor_value_info(n, t, [f"knnquery{n}_dim_0", f"knnquery{n}_dim_1"])
         for n, t in (("idx", TensorProto.INT32), ("dist", TensorProto.FLOAT))]),
}


@pytest.mark.parametrize("name", BROKEN_ON_PURPOSE)
def test_notebooks_broken_models_are_diagnosed(name, tmp_path):
    """The failures the notebooks show on purpose, each found for what it is."""
    path = tmp_path / name
    onnx.save(BROKEN_MODELS[name](), path)
    diagnosis = doctor.diagnose(path, [library_path()])
    assert diagnosis.exit_status == 1, diagnosis
    assert [f.kind for f in diagnosis.errors] == [BROKEN_ON_PURPOSE[name]], diagnosis


def assert_healthy(paths):
    for path in paths:
        diagnosis = doctor.diagnose(path, [library_path()])
        assert diagnosis.exit_status == 0, diagnosis
        resolved = [f.op for f in diagnosis.findings if f.kind == "resolved"]
        # ours, and in ORT-optimized models ORT's own contrib ops (com.microsoft::FusedConv)
        assert any(op.startswith("custom::") for op in resolved), diagnosis
        if "_dynamo" in Path(path).name:  # the new exporter declares every output's type
            assert not [f for f in diagnosis.findings if f.kind == "missing-output-type"], diagnosis


def test_exported_models_are_healthy(exported):
    assert_healthy(exported)


# -- bad input ---------------------------------------------------------------

def bad_files(folder: Path) -> dict:
    good = onnx.load_from_string(single_node_model("Relu", {"x": F32}, ["y"], domain="", opset=17)
                                 .SerializeToString())
    data = good.SerializeToString()
    (folder / "truncated.onnx").write_bytes(data[: len(data) // 2])
    (folder / "text.onnx").write_text("this is not a model\n")
    (folder / "empty.onnx").write_bytes(b"")
    weights = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    external = helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "external",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])], [weights]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(external, folder / "external.onnx", save_as_external_data=True,
              location="external.data", size_threshold=0)
    (folder / "external.data").unlink()
    return {"missing": folder / "missing.onnx", "directory": folder,
            "truncated": folder / "truncated.onnx", "text": folder / "text.onnx",
            "empty": folder / "empty.onnx", "external data missing": folder / "external.onnx"}


@pytest.mark.parametrize("case", ["missing", "directory", "truncated", "text", "empty",
                                  "external data missing"])
def test_unreadable_model_exits_2_with_one_line(case, tmp_path, capsys):
    path = bad_files(tmp_path)[case]
    status, out, err = run_cli([path], capsys)
    assert status == 2 and out == ""
    assert len(err.splitlines()) == 1 and str(path) in err, err
    with pytest.raises(doctor.ModelReadError):
        doctor.diagnose(path)


def test_cli_subprocess_prints_no_traceback(tmp_path):
    path = bad_files(tmp_path)["truncated"]
    done = subprocess.run([sys.executable, "-m", "customops.doctor", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("customops.doctor: ") and done.stderr.count("\n") == 1


def run_cli_child(*args) -> subprocess.CompletedProcess:
    """The doctor as a user runs it, in a child process (a hang fails by timeout)."""
    return subprocess.run([sys.executable, "-m", "customops.doctor", *args], cwd=ROOT,
                          capture_output=True, timeout=60)


def knn_constant_input(tensor: TensorProto, as_initializer: bool) -> onnx.ModelProto:
    """knnquery with a constant first input, as a Constant node or an initializer."""
    extra = [] if as_initializer else [helper.make_node("Constant", [], ["k"], value=tensor)]
    model = single_node_model("knnquery", {"k": ..., "xyz": XYZ, "offset": OFFSET},
                              ["idx", "dist"], extra_nodes=extra)
    if as_initializer:
        tensor.name = "k"
        model.graph.initializer.append(tensor)
    return model


def short_raw_data() -> TensorProto:
    tensor = helper.make_tensor("k", TensorProto.INT64, [2], [0, 0])
    tensor.ClearField("int64_data")
    tensor.raw_data = b"\x01\x02\x03"  # 3 bytes for two int64
    return tensor


@pytest.mark.parametrize("tensor,as_initializer", [
    (helper.make_tensor("k", TensorProto.INT64, [0], []), False),
    (short_raw_data(), True)], ids=["empty-constant", "raw-data-too-short"])
def test_constant_input_that_is_no_attribute_is_explained(tensor, as_initializer, tmp_path):
    """A constant first input the kernel does not take: an empty one (no
    attribute type to infer from it) and one whose raw data is shorter than
    its shape (numpy cannot read it) used to end in a traceback; now the
    doctor reports the input type ORT refuses, exit status 1."""
    path = tmp_path / "model.onnx"
    onnx.save(knn_constant_input(tensor, as_initializer), path)
    done = run_cli_child(str(path), "--library", library_path())
    out = done.stdout.decode()
    assert (done.returncode, done.stderr) == (1, b""), (out, done.stderr)
    (finding,) = doctor.diagnose(path, [library_path()]).errors
    assert (finding.kind, finding.op) == ("input-type", "custom::knnquery"), out
    assert "Type 'tensor(int64)' of input parameter (k)" in finding.ort and finding.ort in out


def test_absurd_opset_is_answered_from_the_runtime(tmp_path):
    """Opset 10**9: the highest opset is read from ORT's refusal ("is till
    opset N") and checked by loading it, not found by walking down one
    version per session (which took hours)."""
    path = tmp_path / "model.onnx"
    model = single_node_model("Relu", {"x": F32}, ["y"], domain="", opset=10**9)
    onnx.save(model, path)
    highest = re.search(r"is till opset (\d+)", ort_message(model))[1]
    done = run_cli_child(str(path))
    assert (done.returncode, done.stderr) == (1, b""), done.stderr
    assert f"fix: export with opset {highest} (the highest this runtime loads" in \
        done.stdout.decode()


def test_highest_opset_bisects_when_the_runtime_names_none():
    """Without a number in ORT's message the search bisects: about log2 of
    the opset in loads, and the answer is the highest version that loads."""
    asked = []

    class Runtime(doctor.probe.Runtime):
        def opset_problem(self, domain, version):
            asked.append(version)
            return None if version <= 26 else "FAIL: refused"

    assert Runtime().max_opset("", 10**9) == 26
    assert len(asked) <= 40, len(asked)
    assert Runtime().max_opset("", 27) == 26 and Runtime().max_opset("", 1) is None


def test_healthy_model_at_a_non_utf8_path(tmp_path):
    """ORT's Python binding cannot take this path: the doctor loads the model
    from its bytes and says it is healthy, naming the path with an escape."""
    folder = os.fsencode(tmp_path)
    path = folder + b"/mod\xe9l.onnx"
    onnx.save(typed_outputs(single_node_model("my_add", {"a": F32, "b": F32}, ["c"])), path)
    done = run_cli_child(path, b"--library", library_path().encode())
    out = done.stdout.decode()
    assert (done.returncode, done.stderr) == (0, b""), (out, done.stderr)
    assert out.startswith(f"{tmp_path}/mod\\xe9l.onnx: onnxruntime ") and \
        out.endswith("0 error(s), 0 warning(s): the model loads\n"), out
    library = folder + b"/lib\xe9.so"  # a library there cannot be registered: say why
    Path(os.fsdecode(library)).write_bytes(Path(library_path()).read_bytes())
    done = run_cli_child(path, b"--library", library)
    assert done.returncode == 1 and done.stderr == b"", done.stderr
    assert "fix: onnxruntime's Python binding takes only UTF-8 paths" in done.stdout.decode()


def test_internal_error_is_one_line(tmp_path, capsys, monkeypatch):
    """A bug of the doctor itself still ends in one line and status 3."""
    def broken(*args):
        raise ValueError("something unforeseen")

    monkeypatch.setattr(doctor.cli, "diagnose", broken)
    status, out, err = run_cli([tmp_path / "any.onnx"], capsys)
    assert (status, out) == (3, "")
    assert err == (f"customops.doctor: internal error on {tmp_path / 'any.onnx'} (ValueError: "
                   "something unforeseen); please report it with the model\n")


# -- torch-free, time bound, another onnxruntime -----------------------------

TORCH_FREE = textwrap.dedent("""
    import runpy, sys
    sys.modules["torch"] = None          # any `import torch` now raises ImportError
    statuses = []
    for args in sys.argv[1:]:
        sys.argv = ["customops.doctor", *args.split("|")]
        try:
            runpy.run_module("customops.doctor", run_name="__main__")
        except SystemExit as done:
            statuses.append(done.code)
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "onnxruntime_extensions")
                    and sys.modules[m] is not None)
    print("STATUSES", statuses, "LOADED", loaded)
""")


def test_doctor_runs_without_torch(tmp_path):
    broken, healthy = tmp_path / "broken.onnx", tmp_path / "healthy.onnx"
    onnx.save(single_node_model("deform_conv2d", DEFORM, ["y"]), broken)
    onnx.save(typed_outputs(single_node_model("my_add", {"a": F32, "b": F32}, ["c"])), healthy)
    env = dict(os.environ, PYTHONPATH=str(Path(customops.__file__).resolve().parent.parent))
    done = subprocess.run([sys.executable, "-c", TORCH_FREE, str(broken),
                           f"{healthy}|--library|{library_path()}"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "STATUSES [1, 0] LOADED []" in done.stdout, done.stdout
    assert "customops.ort.library_path()" in done.stdout  # the fix for the broken model


def big_model(blocks: int) -> onnx.ModelProto:
    """5 * blocks nodes: Conv, Relu, custom::my_add, Mul by a constant that
    differs per block (so ~blocks distinct signatures), Add (residual)."""
    rng = np.random.default_rng(0)
    nodes, weights, previous = [], [], "x"
    for b in range(blocks):
        weights += [numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3), np.float32), f"w{b}"),
                    numpy_helper.from_array(np.array(1 + b / 1000, np.float32), f"s{b}")]
        nodes += [helper.make_node("Conv", [previous, f"w{b}"], [f"c{b}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{b}"], [f"r{b}"]),
                  helper.make_node("my_add", [f"r{b}", f"r{b}"], [f"m{b}"], domain="custom"),
                  helper.make_node("Mul", [f"m{b}", f"s{b}"], [f"u{b}"]),
                  helper.make_node("Add", [f"u{b}", previous], [f"a{b}"])]
        previous = f"a{b}"
    graph = helper.make_graph(
        nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [1, 8, 16, 16])], weights)
    return helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)])


def test_thousand_nodes_cost_a_session_per_signature(monkeypatch):
    """The work is bounded, not the time (a shared machine's load varies): one
    probe session per distinct node signature (Conv, Relu, my_add, Add and 200
    Muls by different constants), plus the doctor's few questions about the
    runtime and the libraries, however many nodes share a signature."""
    model = big_model(200)
    assert len(model.graph.node) == 1000
    signatures = 4 + 200
    sessions = {}
    for name, libraries in (("with the library", [library_path()]), ("without", [])):
        calls = []
        load = probe.Runtime.load
        monkeypatch.setattr(probe.Runtime, "load",
                            lambda self, *a, **k: calls.append(1) or load(self, *a, **k))
        diagnosis = doctor.diagnose(model, libraries)
        monkeypatch.undo()
        sessions[name] = len(calls)
        assert diagnosis.exit_status == (0 if libraries else 1), diagnosis
    errors = diagnosis.errors  # without the library: one finding for all 200 my_add nodes
    assert len(errors) == 1 and len(errors[0].nodes) == 200
    # 219 each on onnxruntime 1.32.0: 204 probes and 15 whole-model and runtime questions
    assert all(signatures <= n <= signatures + 20 for n in sessions.values()), sessions


def test_deform_conv_on_onnxruntime_without_the_kernel(tmp_path):
    """ORT's DeformConv kernel first ships in 1.25.0: on 1.24.4 the doctor must
    say so, from that runtime's own refusal, and name the alternative."""
    python = ort_python("1.24.4", f"onnx=={onnx.__version__}")
    standard = tmp_path / "deform_conv.onnx"
    onnx.save(single_node_model("DeformConv", DEFORM, ["y"], domain="", opset=19), standard)
    ours = tmp_path / "deform_conv2d.onnx"
    onnx.save(typed_outputs(single_node_model("deform_conv2d", DEFORM, ["y"])), ours)
    env = dict(os.environ, PYTHONPATH=str(Path(customops.__file__).resolve().parent.parent))

    def run(*args):
        done = subprocess.run([python, "-m", "customops.doctor", *map(str, args), "--json"],
                              capture_output=True, text=True, env=env, timeout=300)
        assert done.stderr == "", done.stderr
        return done.returncode, json.loads(done.stdout)

    status, report = run(standard)
    assert (status, report["onnxruntime"]) == (1, "1.24.4")
    (finding,) = report["findings"]
    assert (finding["kind"], finding["op"], finding["domain_version"]) == (
        "no-kernel", "ai.onnx::DeformConv", 19)
    assert "Could not find an implementation for DeformConv(19)" in finding["ort"]
    assert "onnxruntime >= 1.25.0" in finding["fix"] and "custom::deform_conv2d" in finding["fix"]
    assert doctor.diagnose(standard).exit_status == 0  # the pinned runtime has the kernel

    status, report = run(ours, "--library", library_path())  # the alternative works on 1.24.4
    assert status == 0, report


@pytest.mark.parametrize("version", [2**62, 2**31, -1, 0])
def test_function_opset_out_of_range_is_no_internal_error(version):
    """An opset version onnx's schema lookups cannot take (a C int), in a
    model-local function's imports, is checked before any lookup."""
    model = selu_function(18, 18)
    model.functions[0].opset_import[0].version = version
    diagnosis = doctor.diagnose(model, [library_path()])
    assert diagnosis.exit_status == (1 if ort_message(model, [library_path()]) else 0), diagnosis


def my_add(edit, standard_node=False) -> onnx.ModelProto:
    """custom::my_add, with a Relu after it if ``standard_node``, edited."""
    relu = [helper.make_node("Relu", ["c"], ["d"])] if standard_node else []
    model = single_node_model("my_add", {"a": F32, "b": F32}, ["c"])
    if relu:
        model.graph.node.extend(relu)
        model.graph.output[0].name = "d"
    edit(model)
    return model


def _opset(domain, version):
    def edit(model):
        for opset in model.opset_import:
            if opset.domain == domain:
                opset.version = version
                return
        model.opset_import.append(helper.make_opsetid(domain, version))
    return edit


def _ir(version):
    return lambda model: setattr(model, "ir_version", version)


# Every range the doctor checks, at and beyond its edges (the IR versions and
# opsets onnxruntime 1.32.0 reads: probed by the doctor, asserted below).
RANGES = {
    **{f"ir-{v}": _ir(v) for v in (-1, 0, 1, 3, 2**31, 2**62)},
    "ir-max": lambda m: setattr(m, "ir_version", probe.Runtime().max_ir_version),
    "ir-max+1": lambda m: setattr(m, "ir_version", probe.Runtime().max_ir_version + 1),
    **{f"ai.onnx-{v}": _opset("", v) for v in (-1, 0, 1, 7, 2**31 - 1, 2**31, 2**40, 2**62)},
    **{f"custom-{v}": _opset("custom", v) for v in (-1, 0, 2, 1000, 2**31, 2**40)},
    **{f"ai.onnx.ml-{v}": _opset("ai.onnx.ml", v) for v in (-1, 0, 1, 5, 6, 2**31)},
    **{f"unused-domain-{v}": _opset("unused.domain", v) for v in (-5, 0, 1, 2**31)},
    "no-opsets": lambda m: m.ClearField("opset_import"),
    "no-ai.onnx": lambda m: m.opset_import.remove(m.opset_import[0]),
}


@pytest.mark.parametrize("standard_node", [False, True], ids=["custom-only", "with-relu"])
@pytest.mark.parametrize("case", RANGES)
def test_the_doctors_verdict_is_onnxruntimes(case, standard_node):
    """On every range the doctor checks, at and beyond its edges: the doctor
    reports an error exactly when onnxruntime, with the library registered,
    refuses the model.  IR version 0 or an opset of 0 that no node uses load
    (onnxruntime 1.32.0): a warning, not an error."""
    model = my_add(RANGES[case], standard_node)
    refused = ort_message(model, [library_path()])
    diagnosis = doctor.diagnose(model, [library_path()])
    assert diagnosis.exit_status == (1 if refused else 0), (refused, str(diagnosis))


def test_ir_version_0_loads_and_is_a_warning():
    """The false alarm of issue 49: IR 0 called an error while onnxruntime
    loads and runs the model with the library registered."""
    model = my_add(_ir(0))
    assert ort_message(model, [library_path()]) == ""
    assert onnxruntime.__version__ == "1.32.0"
    with pytest.raises(onnx.checker.ValidationError):  # "other tools may not"
        onnx.checker.check_model(model)
    diagnosis = doctor.diagnose(model, [library_path()])
    assert diagnosis.exit_status == 0, diagnosis
    (finding,) = [f for f in diagnosis.findings if f.kind == "ir-version"]
    assert finding.severity == "warning" and finding.summary == (
        "IR version 0: IR versions start at 1; onnxruntime 1.32.0 loads the model all the same, "
        "other tools may not"), finding
    assert "the model loads" in str(diagnosis).splitlines()[-1]


@pytest.mark.parametrize("version", [0, -1, 2**31])
def test_opset_out_of_range_of_a_used_domain_is_an_error(version):
    """ai.onnx at opset 0, -1 or 2**31 with a standard node: onnxruntime
    refuses, and the doctor names the opset."""
    model = my_add(_opset("", version), standard_node=True)
    assert ort_message(model, [library_path()])
    diagnosis = doctor.diagnose(model, [library_path()])
    assert any(f.kind == "opset" and "which is no opset version" in f.summary
               for f in diagnosis.errors), diagnosis
