"""Single-node ONNX models built with onnx.helper, and ORT sessions for them."""

from __future__ import annotations

import numpy as np
import onnxruntime
from onnx import TensorProto, helper

# onnx 1.23 writes IR version 14 by default; onnxruntime 1.31 reads up to 13.
IR_VERSION = 10
OPSET = 19  # ORT's CPU DeformConv needs opset >= 19

_ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int32): TensorProto.INT32}


def _value_info(name: str, array: np.ndarray):
    return helper.make_tensor_value_info(name, _ELEM[array.dtype], list(array.shape))


def single_node(op_type: str, inputs: dict, outputs: list[str], domain: str = "custom",
                extra_nodes=(), **attrs):
    """A model with one node (plus ``extra_nodes`` before it, e.g. Constants).

    ``inputs`` maps the node's inputs, in order, to example arrays (their
    dtype and shape become the graph input's type) or to None for an absent
    optional input (an empty name in the node; trailing ones are dropped).
    Names not in ``inputs`` but produced by ``extra_nodes`` may be given with
    the value ``...``."""
    names, graph_inputs = [], []
    for name, array in inputs.items():
        if array is None:
            names.append("")
            continue
        names.append(name)
        if array is not Ellipsis:
            graph_inputs.append(_value_info(name, array))
    while names and names[-1] == "":
        names.pop()
    node = helper.make_node(op_type, names, outputs, domain=domain, **attrs)
    graph = helper.make_graph(
        [*extra_nodes, node], op_type, graph_inputs,
        [helper.make_empty_tensor_value_info(name) for name in outputs])
    opsets = [helper.make_opsetid("", OPSET)]
    if domain:
        opsets.append(helper.make_opsetid(domain, 1))
    return helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION)


def mul_add_graph(a: np.ndarray, b: np.ndarray):
    """c = a * 2.0 + b from standard ops: Constant, Mul, Add."""
    two = helper.make_node("Constant", [], ["two"],
                           value=helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]))
    mul = helper.make_node("Mul", ["a", "two"], ["twice_a"])
    model = single_node("Add", {"twice_a": ..., "b": b}, ["c"], domain="",
                        extra_nodes=[two, mul])
    model.graph.input.insert(0, _value_info("a", a))
    return model


def session(model, threads: int, custom: bool = True) -> onnxruntime.InferenceSession:
    """A CPU session with ``threads`` intra-op threads (one of them the
    caller's), with our custom-op library registered when ``custom``."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    if custom:
        from customops.ort import session as custom_session

        return custom_session(model, sess_options=options)
    return onnxruntime.InferenceSession(model.SerializeToString(), sess_options=options,
                                        providers=["CPUExecutionProvider"])


def runner(model, threads: int, custom: bool = True):
    """call(inputs) -> session outputs; feeds the graph inputs by name from
    the inputs dict (which may hold more arrays than the graph needs)."""
    sess = session(model, threads, custom)
    names = [i.name for i in sess.get_inputs()]
    return lambda inputs: sess.run(None, {name: inputs[name] for name in names})
