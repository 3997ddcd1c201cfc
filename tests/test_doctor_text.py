"""customops.doctor on models whose strings are not UTF-8 text.

Python's protobuf returns such a string as bytes.  Each model here is built
with onnx.helper, then one field gets raw bytes (hostile_models.with_raw_string);
each once ended the doctor in a traceback or an "internal error" (issue 34).
Now the doctor reports the field and the node, and goes on with the rest.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from customops import doctor
from customops.ort import library_path
from helpers import single_node_model
from hostile_models import NOT_UTF8, function_model, with_raw_string

F32 = np.zeros((4, 3), np.float32)
SHOWN = NOT_UTF8.decode("utf-8", "backslashreplace")  # n\xe1\x80o\xff\xfe8
KNN = {"xyz": np.zeros((6, 3), np.float32), "offset": np.array([6], np.int32)}


def my_add() -> onnx.ModelProto:
    return single_node_model("my_add", {"a": F32, "b": F32}, ["c"])


def node_name(model, text):
    model.graph.node[0].name = text


def two_attributes(model, text):
    """knnquery with nsample and a second attribute, the one renamed (the
    doctor sorts attributes by name)."""
    model.graph.node[0].attribute.append(onnx.helper.make_attribute(text, 1))


def output_name(model, text):
    model.graph.node[0].output[0] = model.graph.output[0].name = text


def op_type(model, text):
    model.graph.node[0].op_type = text


def body_op_type(model, text):
    model.functions[0].node[0].op_type = text


# name: (model, field given raw bytes, libraries, the field the finding names,
#        the node label it names, another finding the doctor still makes)
CASES = {
    # ", ".join(self.nodes[:3]) on a bytes node name: TypeError while printing
    "node-name": (my_add, node_name, [], "graph.node.name", SHOWN, "unresolved-op"),
    # sorted() over str and bytes attribute names: "'<' not supported"
    "attribute-name": (lambda: single_node_model("knnquery", KNN, ["idx", "dist"], nsample=2),
                       two_attributes, "ours", "graph.node.attribute.name", "#0", None),
    # the session's output names decoded as UTF-8: UnicodeDecodeError on byte 0xe1
    "output-name": (my_add, output_name, "ours", "graph.node.output", "#0", None),
    # onnx.defs.has on a function body's bytes op type ("Invoked with types: bytes, int, str")
    "function-op-type": (function_model, body_op_type, [], "functions.node.op_type",
                         "functions[0].node[0]", None),
    # a standard op of that name: ORT's message quotes it (onnxruntime printed "EP Error")
    "op-type": (lambda: single_node_model("Relu", {"x": F32}, ["y"], domain="", opset=17),
                op_type, [], "graph.node.op_type", "#0", "op-not-in-opset"),
}


@pytest.mark.parametrize("case", CASES)
def test_string_that_is_not_utf8_is_a_finding(case, tmp_path, capsys):
    build, set_field, libraries, field, label, other = CASES[case]
    libraries = [library_path()] if libraries == "ours" else libraries
    path = tmp_path / "model.onnx"
    path.write_bytes(with_raw_string(build(), set_field))
    args = [str(path), *[x for lib in libraries for x in ("--library", lib)]]

    status, out, err = doctor.main(args), *capsys.readouterr()
    assert (status, err) == (1, ""), err
    assert f"error   {field} of node {label} is not UTF-8 text" in out, out
    assert f"'{SHOWN}'" in out  # the bytes, escaped

    status, out, err = doctor.main([*args, "--json"]), *capsys.readouterr()
    assert (status, err) == (1, ""), err
    findings = json.loads(out)["findings"]
    (text,) = [f for f in findings if f["kind"] == "not-utf8" and f["summary"].startswith(field)]
    assert text["nodes"] == [label] and text["severity"] == "error"
    if other:  # the rest of the model is still checked
        assert [f["kind"] for f in findings if f["kind"] == other] == [other], findings
