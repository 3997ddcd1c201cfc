"""Small ONNX models built by hand with onnx.helper (no exporter, no torch).

Tests use them to run one ORT kernel on its own; the benchmark to time one
node against another; a reader to see the smallest model that uses an op.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from .ort import DOMAIN, OPSET_VERSION

# onnx 1.23 writes IR version 14 by default, which onnxruntime reads only since
# 1.32; IR 10 loads in every runtime the library supports (1.24 and later).
IR_VERSION = 10
OPSET = 19  # ORT's CPU DeformConv needs opset >= 19


def single_node_model(op_type: str, inputs: dict, outputs, domain: str = DOMAIN,
                      opset: int = OPSET, *, static_shapes: bool = False, extra_nodes=(),
                      **attrs) -> onnx.ModelProto:
    """A model with one node of ``op_type`` (after ``extra_nodes``, such as
    Constants).

    ``inputs`` maps the node's inputs, in order, to example arrays, whose
    dtype and rank (and with ``static_shapes`` their sizes; otherwise the
    dimensions are symbols like ``xyz_0``) become the graph input's type; to
    None for an absent optional input (an empty name in the node; trailing
    ones are dropped); or to ``...`` for a value one of ``extra_nodes``
    produces.  ``attrs`` become the node's attributes."""
    graph_inputs, names = [], []
    for name, array in inputs.items():
        names.append("" if array is None else name)
        if array is None or array is Ellipsis:
            continue
        dims = list(np.shape(array)) if static_shapes else [
            f"{name}_{i}" for i in range(np.ndim(array))]
        elem = helper.np_dtype_to_tensor_dtype(np.asarray(array).dtype)
        graph_inputs.append(helper.make_tensor_value_info(name, elem, dims))
    while names and names[-1] == "":
        names.pop()
    node = helper.make_node(op_type, names, list(outputs), domain=domain, **attrs)
    graph = helper.make_graph(
        [*extra_nodes, node], op_type, graph_inputs,
        [helper.make_empty_tensor_value_info(name) for name in outputs])
    opsets = [helper.make_opsetid("", opset)]
    if domain:
        opsets.append(helper.make_opsetid(domain, OPSET_VERSION))
    return helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION)
