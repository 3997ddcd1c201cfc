"""Symbolic functions (符号函数) for the TorchScript exporter (dynamo=False).

The TorchScript exporter walks the traced graph and, for every node, calls
the symbolic function registered for its kind; the function adds ONNX nodes
to ``g`` and returns their outputs.  ``register()`` installs one for each
``customops::`` operator; ``KNNQuery.symbolic`` reuses ``knn_query_node``.

torch 2.9+ warns that this exporter and ``register_custom_op_symbolic`` are
deprecated; both still work in the pinned torch.
"""

from __future__ import annotations

import torch
from torch.onnx import register_custom_op_symbolic
from torch.onnx.symbolic_helper import (
    _is_none,
    _optional_input_placeholder_tensor,
    parse_args,
)

from .ort import DOMAIN


def _absent(value):
    return value is None or _is_none(value)


def _optional_inputs(g, *values):
    """A node's trailing optional inputs: absent ones at the end are left
    out; an absent one before a present one becomes an empty input (ONNX's
    way of skipping it), which needs torch's typed placeholder."""
    values = list(values)
    while values and _absent(values[-1]):
        values.pop()
    return [_optional_input_placeholder_tensor(g) if _absent(v) else v for v in values]


def _int32(g, value):
    """int64 offsets (which PyTorch accepts) cast to the int32 of the ONNX
    contract; int32 ones, and absent ones, pass unchanged."""
    if _absent(value) or value.type().scalarType() != "Long":
        return value
    cast = g.op("Cast", value, to_i=torch.onnx.TensorProtoDataType.INT32)
    return cast.setType(value.type().with_dtype(torch.int32))


def knn_query_node(g, nsample, xyz, offset, new_xyz=None, new_offset=None):
    """custom::knnquery with nsample as an attribute and fully typed outputs."""
    inputs = [xyz, _int32(g, offset), *_optional_inputs(g, new_xyz, _int32(g, new_offset))]
    idx, dist = g.op(f"{DOMAIN}::knnquery", *inputs, nsample_i=nsample, outputs=2)
    queries = xyz if _absent(new_xyz) else new_xyz
    m = _size(queries, 0)
    idx.setType(xyz.type().with_dtype(torch.int32).with_sizes([m, nsample]))
    dist.setType(xyz.type().with_dtype(torch.float32).with_sizes([m, nsample]))
    return idx, dist


def _size(value, dim):
    sizes = value.type().sizes() if value.type().kind() == "TensorType" else None
    return sizes[dim] if sizes and len(sizes) > dim else None


@parse_args("v", "v")
def my_add_symbolic(g, a, b):
    return g.op(f"{DOMAIN}::my_add", a, b).setType(a.type())


@parse_args("i", "v", "v", "v", "v")
def knn_query_symbolic(g, nsample, xyz, offset, new_xyz, new_offset):
    return knn_query_node(g, nsample, xyz, offset, new_xyz, new_offset)


@parse_args("v", "v", "v", "v", "v", "is", "is", "is", "i", "i")
def deform_conv2d_symbolic(g, input, weight, offset, mask, bias, stride, padding, dilation,
                           groups, offset_groups):
    output = g.op(
        f"{DOMAIN}::deform_conv2d", input, weight, offset, *_optional_inputs(g, mask, bias),
        stride_i=stride, padding_i=padding, dilation_i=dilation,
        groups_i=groups, offset_groups_i=offset_groups,
    )
    # (N, O, oh, ow): typed, so the exporter has no unknown output to warn about.
    sizes = [_size(input, 0), _size(weight, 0), _size(offset, 2), _size(offset, 3)]
    return output.setType(input.type().with_sizes(sizes))


def ms_deform_attn_node(g, value, spatial_shapes, level_start_index, sampling_locations,
                        attention_weights, im2col_step):
    """custom::ms_deform_attn, typed (N, Q, M * D) where the sizes are known."""
    output = g.op(f"{DOMAIN}::ms_deform_attn", value, spatial_shapes, level_start_index,
                  sampling_locations, attention_weights, im2col_step_i=im2col_step)
    heads, channels = _size(value, 2), _size(value, 3)
    sizes = [_size(value, 0), _size(sampling_locations, 1),
             heads * channels if heads is not None and channels is not None else None]
    return output.setType(value.type().with_sizes(sizes))


@parse_args("v", "v", "v", "v", "v", "i")
def ms_deform_attn_symbolic(g, value, spatial_shapes, level_start_index, sampling_locations,
                            attention_weights, im2col_step):
    return ms_deform_attn_node(g, value, spatial_shapes, level_start_index, sampling_locations,
                               attention_weights, im2col_step)


def register(opset_version: int = 9) -> None:
    """Register the symbolic of every customops:: operator (idempotent)."""
    register_custom_op_symbolic("customops::my_add", my_add_symbolic, opset_version)
    register_custom_op_symbolic("customops::knn_query", knn_query_symbolic, opset_version)
    register_custom_op_symbolic("customops::deform_conv2d", deform_conv2d_symbolic, opset_version)
    register_custom_op_symbolic("customops::ms_deform_attn", ms_deform_attn_symbolic,
                                opset_version)
