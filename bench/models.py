"""Single-node ONNX models built with onnx.helper, and ORT sessions for them."""

from __future__ import annotations

import numpy as np
import onnxruntime
from onnx import TensorProto, helper

from customops.builder import single_node_model



def single_node(op_type: str, inputs: dict, outputs: list[str], domain: str = "custom",
                extra_nodes=(), **attrs):
    """A single-node model whose graph inputs have the examples' exact shapes."""
    return single_node_model(op_type, inputs, outputs, domain, static_shapes=True,
                             extra_nodes=extra_nodes, **attrs)


def mul_add_graph(a: np.ndarray, b: np.ndarray):
    """c = a * 2.0 + b from standard ops: Constant, Mul, Add."""
    two = helper.make_node("Constant", [], ["two"],
                           value=helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]))
    mul = helper.make_node("Mul", ["a", "two"], ["twice_a"])
    model = single_node("Add", {"twice_a": ..., "b": b}, ["c"], domain="",
                        extra_nodes=[two, mul])
    model.graph.input.insert(0, helper.make_tensor_value_info("a", TensorProto.FLOAT,
                                                              list(a.shape)))
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
