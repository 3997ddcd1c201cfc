"""Test helpers: single-node ONNX models built by hand, and references.

Building the ONNX node with onnx.helper (not with an exporter) tests the ORT
kernels on their own; the exporter tests then check that the exporters
produce the same nodes.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

# onnx 1.23 writes IR version 14 by default; onnxruntime 1.31 reads up to 13.
IR_VERSION = 10

_ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int32): TensorProto.INT32,
         np.dtype(np.int64): TensorProto.INT64, np.dtype(np.float64): TensorProto.DOUBLE}


def single_node_model(op_type, inputs: dict, outputs, domain="custom", opset=19, **attrs):
    """A model with one node.  ``inputs`` maps names to example arrays (for
    their dtype and rank; dims stay symbolic) or to None for an input left
    out (an empty name in the node)."""
    graph_inputs, node_inputs = [], []
    for name, array in inputs.items():
        if array is None:
            node_inputs.append("")
            continue
        node_inputs.append(name)
        dims = [f"{name}_{i}" for i in range(np.ndim(array))]
        graph_inputs.append(helper.make_tensor_value_info(name, _ELEM[array.dtype], dims))
    while node_inputs and node_inputs[-1] == "":
        node_inputs.pop()
    node = helper.make_node(op_type, node_inputs, list(outputs), domain=domain, **attrs)
    graph = helper.make_graph(
        [node], op_type, graph_inputs,
        [helper.make_empty_tensor_value_info(name) for name in outputs])
    opsets = [helper.make_opsetid("", opset)]
    if domain:
        opsets.append(helper.make_opsetid(domain, 1))
    return helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION)


def feeds(inputs: dict) -> dict:
    return {name: array for name, array in inputs.items() if array is not None}


def knn_reference(nsample, xyz, offset, new_xyz=None, new_offset=None):
    """Brute force in float64: every query against every point of its cloud,
    sorted by (distance, index); padded with -1 / inf.  Independent of the
    kernel (numpy only)."""
    if new_xyz is None:
        new_xyz, new_offset = xyz, offset
    xyz64, q64 = xyz.astype(np.float64), new_xyz.astype(np.float64)
    m = len(new_xyz)
    idx = np.full((m, nsample), -1, np.int32)
    dist = np.full((m, nsample), np.inf, np.float32)
    start, qstart = 0, 0
    for end, qend in zip(offset, new_offset):
        points = xyz64[start:end]
        for row in range(qstart, qend):
            d2 = ((points - q64[row]) ** 2).sum(axis=1)
            order = np.lexsort((np.arange(len(points)), d2))[:nsample]
            idx[row, :len(order)] = order + start
            dist[row, :len(order)] = np.sqrt(d2[order])
        start, qstart = end, qend
    return idx, dist


def random_clouds(rng, sizes, dims=3, duplicates=False):
    """Packed clouds of the given sizes: (xyz float32 (n, 3), offset int32)."""
    parts = []
    for size in sizes:
        points = rng.random((size, dims), dtype=np.float32)
        if duplicates and size > 1:
            # Many exact repeats: ties that only the index can break.
            points = points[rng.integers(0, max(1, size // 4), size)]
        parts.append(points)
    xyz = np.concatenate(parts) if parts else np.zeros((0, dims), np.float32)
    return np.ascontiguousarray(xyz, np.float32), np.cumsum(sizes).astype(np.int32)
