"""The PyTorch side of the operators: torch.ops.customops.* plus Python APIs.

Loading this module loads the compiled extension ``customops._C``, whose
``TORCH_LIBRARY(customops, m)`` block defines the operators, and registers
what the C++ side cannot: fake (meta) implementations so that torch.export
and torch.compile can trace the ops without running them, and my_add's
gradient.
"""

from __future__ import annotations

import torch

from . import _C  # noqa: F401  (registers torch.ops.customops.*)

__all__ = ["my_add", "knn_query", "KNNQuery", "deform_conv2d"]


# --- my_add -----------------------------------------------------------------


def my_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """2 * a + b for float32 CPU tensors of one shape."""
    return torch.ops.customops.my_add(a, b)


@torch.library.register_fake("customops::my_add")
def _(a, b):
    torch._check(a.shape == b.shape, lambda: "my_add: b must have the shape of a")
    return torch.empty_like(a)


def _my_add_backward(ctx, grad):
    return 2 * grad, grad


torch.library.register_autograd("customops::my_add", _my_add_backward)


# --- knn_query ----------------------------------------------------------------


@torch.library.register_fake("customops::knn_query")
def _(nsample, xyz, offset, new_xyz=None, new_offset=None):
    m = (new_xyz if new_xyz is not None else xyz).shape[0]
    idx = xyz.new_empty((m, nsample), dtype=torch.int32)
    return idx, xyz.new_empty((m, nsample))


class KNNQuery(torch.autograd.Function):
    """k nearest neighbours of packed point clouds (the seeds' KNNQuery).

    forward(nsample, xyz, offset, new_xyz=None, new_offset=None) -> (idx, dist)

    ``nsample`` is a Python int: it becomes the ONNX attribute ``nsample`` of
    ``custom::knnquery``, not a tensor input.  ``symbolic`` serves the
    TorchScript exporter; the torch.export exporter traces ``forward`` and
    meets ``torch.ops.customops.knn_query``, which
    ``customops.translations.TABLE`` maps to the same ONNX node.
    """

    @staticmethod
    def forward(ctx, nsample, xyz, offset, new_xyz=None, new_offset=None):
        idx, dist = torch.ops.customops.knn_query(nsample, xyz, offset, new_xyz, new_offset)
        ctx.mark_non_differentiable(idx, dist)
        return idx, dist

    @staticmethod
    def symbolic(g, nsample, xyz, offset, new_xyz=None, new_offset=None):
        from .symbolic import knn_query_node

        return knn_query_node(g, nsample, xyz, offset, new_xyz, new_offset)


def knn_query(nsample: int, xyz, offset, new_xyz=None, new_offset=None):
    """idx (m, nsample) int32 and dist (m, nsample) float32; see csrc/kernels/knn_query.h."""
    return KNNQuery.apply(nsample, xyz, offset, new_xyz, new_offset)


# --- deform_conv2d ------------------------------------------------------------


_DEFORM_DTYPES = (torch.float32, torch.float64, torch.float16)
_INT32_MAX = 2**31 - 1


def _dtype_name(dtype):
    return str(dtype).removeprefix("torch.")


def _shape_str(values):
    return "[" + ", ".join(str(v) for v in values) + "]"


@torch.library.register_fake("customops::deform_conv2d")
def _(input, weight, offset, mask, bias, stride, padding, dilation, groups, offset_groups):
    """The checks of csrc/torch/ops.cpp and deform_conv2d_check
    (csrc/kernels/deform_conv2d.cpp) in the same order and words, so that
    torch.export and torch.compile reject a bad call while tracing; then the
    output (N, O, out_h, out_w) in the input's dtype."""

    # Each condition goes to torch._check on its own (never through `and` or
    # all(), which would turn a symbolic size into a guard).
    def check(conditions, *parts):
        for ok in conditions if isinstance(conditions, list) else [conditions]:
            torch._check(ok, lambda: "deform_conv2d: " + "".join(str(p) for p in parts))

    check(input.dtype in _DEFORM_DTYPES,
          "input must be float32, float64 or float16, got ", _dtype_name(input.dtype))
    for name, t in (("weight", weight), ("offset", offset), ("mask", mask), ("bias", bias)):
        if t is not None:
            check(t.dtype == input.dtype, name, " must have the dtype of input (",
                  _dtype_name(input.dtype), "), got ", _dtype_name(t.dtype))
    inp, wt = input.shape, weight.shape
    check(len(inp) == 4, "input must be 4-D (N, C, H, W), got shape ", _shape_str(inp))
    check(len(wt) == 4, "weight must be 4-D (out_channels, C/groups, kh, kw), got shape ",
          _shape_str(wt))
    for name, values in (("stride", stride), ("padding", padding), ("dilation", dilation)):
        check(len(values) == 2, name, " must have 2 values (h, w), got ", _shape_str(values))
    n, c, h, w = inp
    check([n >= 0, c >= 1, h >= 1, w >= 1],
          "input must have N >= 0 and C, H, W >= 1, got shape ", _shape_str(inp))
    check([d >= 1 for d in wt], "weight dimensions must all be >= 1, got shape ",
          _shape_str(wt))
    for name, values, low in (("stride", stride, 1), ("padding", padding, 0),
                              ("dilation", dilation, 1)):
        check([v >= low for v in values], name, " must be >= ", low, ", got ",
              _shape_str(values))
    check(groups >= 1, "groups must be >= 1, got ", groups)
    check(offset_groups >= 1, "offset_groups must be >= 1, got ", offset_groups)
    for name, values in (("input shape", inp), ("weight shape", wt), ("stride", stride),
                         ("padding", padding), ("dilation", dilation)):
        check([v <= _INT32_MAX for v in values], name, " values must be at most ",
              _INT32_MAX, ", got ", _shape_str(values))
    check(h * w <= _INT32_MAX, "input plane H * W must be at most ", _INT32_MAX,
          ", got shape ", _shape_str(inp))
    out_channels, kh, kw = wt[0], wt[2], wt[3]
    check(c % groups == 0, "input channels C = ", c, " must be divisible by groups = ", groups)
    check(c % offset_groups == 0, "input channels C = ", c,
          " must be divisible by offset_groups = ", offset_groups)
    check(out_channels % groups == 0, "weight.shape[0] (out_channels) = ", out_channels,
          " must be divisible by groups = ", groups)
    check(wt[1] == c // groups, "weight.shape[1] must be C/groups = ", c // groups, ", got ",
          wt[1])
    out = []
    for axis, size, k, s, p, d in (("height", h, kh, stride[0], padding[0], dilation[0]),
                                   ("width", w, kw, stride[1], padding[1], dilation[1])):
        padded, extent = size + 2 * p, d * (k - 1) + 1
        check(extent <= padded, "kernel ", axis, " extent ", extent,
              " (dilation * (k - 1) + 1) must fit in the padded input ", axis, " ", padded,
              " (", axis, " + 2 * padding)")
        out.append((padded - extent) // s + 1)
    output_shape = (n, out_channels, *out)
    count = 1
    for d in output_shape:  # the running product, as the C++ check computes it
        count *= d
        check(count <= 2**60, "output has too many elements (limit 2^60), shape ",
              _shape_str(output_shape))
    taps = kh * kw
    for name, t, expected, layout in (
            ("offset", offset, (n, 2 * offset_groups * taps, *out),
             "(N, 2*offset_groups*kh*kw, out_h, out_w)"),
            ("mask", mask, (n, offset_groups * taps, *out), "(N, offset_groups*kh*kw, out_h, out_w)"),
            ("bias", bias, (out_channels,), "(out_channels)")):
        if t is not None:
            check([t.dim() == len(expected)] + [a == b for a, b in zip(t.shape, expected)],
                  name, " must have shape ", layout, " = ", _shape_str(expected), ", got ",
                  _shape_str(t.shape))
    return input.new_empty(output_shape)


def deform_conv2d(input, offset, weight, bias=None, stride=(1, 1), padding=(0, 0),
                  dilation=(1, 1), mask=None):
    """Drop-in for ``torchvision.ops.deform_conv2d`` (same Python signature),
    running the kernel in csrc/kernels.  groups and offset_groups are deduced
    from the shapes exactly as torchvision does."""
    pair = torch.nn.modules.utils._pair
    # Empty weight dimensions are left to the C++ check, which names them.
    taps = 2 * weight.shape[2] * weight.shape[3]
    groups = input.shape[1] // weight.shape[1] if weight.shape[1] else 1
    offset_groups = offset.shape[1] // taps if taps else 1
    return torch.ops.customops.deform_conv2d(
        input, weight, offset, mask, bias, pair(stride), pair(padding), pair(dilation),
        groups, offset_groups,
    )
