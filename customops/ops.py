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


def _conv_out(size, kernel, stride, padding, dilation):
    return (size + 2 * padding - (dilation * (kernel - 1) + 1)) // stride + 1


@torch.library.register_fake("customops::deform_conv2d")
def _(input, weight, offset, mask, bias, stride, padding, dilation, groups, offset_groups):
    n, _, h, w = input.shape
    kh, kw = weight.shape[2:]
    out_h = _conv_out(h, kh, stride[0], padding[0], dilation[0])
    out_w = _conv_out(w, kw, stride[1], padding[1], dilation[1])
    return input.new_empty((n, weight.shape[0], out_h, out_w))


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
