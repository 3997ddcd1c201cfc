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


# --- checks the fake implementations share with the C++ binding ------------------
#
# A fake (meta) implementation runs instead of the kernel when torch.export or
# torch.compile trace a call.  Ours repeat the C++ checks that need no tensor
# data (device, dtype, rank, shape, nsample), in the same order and with the
# same words, so that a bad call fails while tracing, not later at run time or
# in ONNX Runtime.  tests/test_fake.py holds the two to the same messages.

# c10's names for dtypes, as TORCH_CHECK prints them.
_C10_NAMES = {
    torch.float32: "Float", torch.float64: "Double", torch.float16: "Half",
    torch.bfloat16: "BFloat16", torch.int8: "Char", torch.uint8: "Byte", torch.int16: "Short",
    torch.int32: "Int", torch.int64: "Long", torch.bool: "Bool",
    torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble",
}


def _dtype_name(dtype):
    return _C10_NAMES.get(dtype, str(dtype).removeprefix("torch."))


def _dtype_names(dtypes):
    names = [_dtype_name(d) for d in dtypes]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def _shape(t):
    return "[" + ", ".join(str(d) for d in t.shape) + "]"


def _check_tensor(t, op, name, dtypes):
    """check_tensor in csrc/torch/ops.cpp: device, then dtype."""
    torch._check(t.device.type == "cpu",
                 lambda: f"{op}: {name} must be a CPU tensor, got {t.device}")
    torch._check(t.dtype in dtypes,
                 lambda: f"{op}: {name} must be {_dtype_names(dtypes)}, got {_dtype_name(t.dtype)}")


# --- my_add -----------------------------------------------------------------

MY_ADD_DTYPES = (torch.float32, torch.float64, torch.float16)


def my_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """2 * a + b for CPU tensors of one shape and one dtype (float32, float64 or
    float16, computed in float32), in any layout; the result is contiguous."""
    return torch.ops.customops.my_add(a, b)


@torch.library.register_fake("customops::my_add")
def _(a, b):
    _check_tensor(a, "my_add", "a", MY_ADD_DTYPES)
    _check_tensor(b, "my_add", "b", MY_ADD_DTYPES)
    torch._check(b.dtype == a.dtype, lambda: f"my_add: b must have the dtype of a, "
                 f"{_dtype_name(a.dtype)}, got {_dtype_name(b.dtype)}")
    torch._check(a.shape == b.shape,
                 lambda: f"my_add: b must have the shape of a {_shape(a)}, got {_shape(b)}")
    return a.new_empty(a.shape)


def _my_add_backward(ctx, grad):
    return 2 * grad, grad


torch.library.register_autograd("customops::my_add", _my_add_backward)


# --- knn_query ----------------------------------------------------------------

OFFSET_DTYPES = (torch.int32, torch.int64)
# csrc/kernels/knn_query.cpp
KNN_MAX_NSAMPLE = 65536
KNN_MAX_OUTPUT_ELEMENTS = 1 << 28


@torch.library.register_fake("customops::knn_query")
def _(nsample, xyz, offset, new_xyz=None, new_offset=None):
    op = "knn_query"
    _check_tensor(xyz, op, "xyz", (torch.float32,))
    _check_tensor(offset, op, "offset", OFFSET_DTYPES)
    if new_xyz is not None:
        _check_tensor(new_xyz, op, "new_xyz", (torch.float32,))
    if new_offset is not None:
        _check_tensor(new_offset, op, "new_offset", OFFSET_DTYPES)
    # knn_query_check, in its order; the offsets' values are only seen at run time.
    torch._check(xyz.dim() == 2 and xyz.shape[1] == 3,
                 lambda: f"{op}: xyz must have shape (n, 3), got {_shape(xyz)}")
    torch._check(offset.dim() == 1 and offset.shape[0] >= 1,
                 lambda: f"{op}: offset must be 1-D with at least one element, got shape "
                 f"{_shape(offset)}")
    torch._check((new_xyz is None) == (new_offset is None),
                 lambda: f"{op}: new_xyz and new_offset must be given together")
    if new_xyz is not None:
        torch._check(new_xyz.dim() == 2 and new_xyz.shape[1] == 3,
                     lambda: f"{op}: new_xyz must have shape (m, 3), got {_shape(new_xyz)}")
        torch._check(new_offset.shape == offset.shape,
                     lambda: f"{op}: new_offset must have the shape of offset {_shape(offset)}, "
                     f"got {_shape(new_offset)}")
    torch._check(nsample >= 1, lambda: f"{op}: nsample must be at least 1, got {nsample}")
    torch._check(nsample <= KNN_MAX_NSAMPLE,
                 lambda: f"{op}: nsample must be at most {KNN_MAX_NSAMPLE}, got {nsample}")
    m = (new_xyz if new_xyz is not None else xyz).shape[0]
    if isinstance(m, int):  # a bound on a dynamic m would specialize it: left to run time
        torch._check(m <= KNN_MAX_OUTPUT_ELEMENTS // nsample,
                     lambda: f"{op}: m * nsample must be at most {KNN_MAX_OUTPUT_ELEMENTS} "
                     f"(1 GiB per output), got m = {m}, nsample = {nsample}")
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
    """idx (m, nsample) int32 and dist (m, nsample) float32; see csrc/kernels/knn_query.h.
    xyz and new_xyz are float32 in any layout, offsets int32 or int64."""
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
