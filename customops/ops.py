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

__all__ = ["my_add", "knn_query", "KNNQuery", "deform_conv2d", "DeformConv2d"]


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


def _shape_values(values):
    return "[" + ", ".join(str(v) for v in values) + "]"


def _shape(t):
    return _shape_values(t.shape)


# my_add and deform_conv2d: float16 is computed in float32 and rounded once.
FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16)


def _check_same_dtype(t, op, name, reference, dtype):
    """check_same_dtype in csrc/torch/ops.cpp."""
    torch._check(t.dtype == dtype, lambda: f"{op}: {name} must have the dtype of {reference}, "
                 f"{_dtype_name(dtype)}, got {_dtype_name(t.dtype)}")


def _check_tensor(t, op, name, dtypes):
    """check_tensor in csrc/torch/ops.cpp: device, then dtype."""
    torch._check(t.device.type == "cpu",
                 lambda: f"{op}: {name} must be a CPU tensor, got {t.device}")
    torch._check(t.dtype in dtypes,
                 lambda: f"{op}: {name} must be {_dtype_names(dtypes)}, got {_dtype_name(t.dtype)}")


# --- my_add -----------------------------------------------------------------



def my_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """2 * a + b for CPU tensors of one shape and one dtype (float32, float64 or
    float16, computed in float32), in any layout; the result is contiguous."""
    return torch.ops.customops.my_add(a, b)


@torch.library.register_fake("customops::my_add")
def _(a, b):
    _check_tensor(a, "my_add", "a", FLOAT_DTYPES)
    _check_tensor(b, "my_add", "b", FLOAT_DTYPES)
    _check_same_dtype(b, "my_add", "b", "a", a.dtype)
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


def _knn_dist_backward(grad_dist, xyz, new_xyz, idx):
    """Gradients of dist = |query - xyz[idx]| for xyz and new_xyz (None when the
    queries are xyz, which then gets both shares).  The derivative of a distance
    is the unit vector from the neighbour to the query; where the two coincide
    (dist 0) the norm has none, and the gradient is 0 (pytorch3d's knn_points
    and torch.linalg.norm do the same).  Padding (idx -1, dist +inf) depends on
    no point: 0.  Written with differentiable torch ops, so double backward works."""
    queries = xyz if new_xyz is None else new_xyz
    rows = idx.long().clamp(min=0)
    diff = queries.unsqueeze(1) - xyz[rows]                        # (m, nsample, 3)
    norm = torch.linalg.vector_norm(diff, dim=2, keepdim=True)
    use = (idx >= 0).unsqueeze(2) & (norm > 0)
    grad = torch.where(use, grad_dist.unsqueeze(2) * diff / torch.where(use, norm, 1), 0)
    grad_xyz = torch.zeros_like(xyz).index_add(0, rows.flatten(), -grad.flatten(0, 1))
    grad_queries = grad.sum(1)
    if new_xyz is None:
        return grad_xyz + grad_queries, None
    return grad_xyz, grad_queries


def _knn_setup_context(ctx, inputs, output):
    _, xyz, _, new_xyz, _ = inputs
    ctx.save_for_backward(xyz, new_xyz, output[0])


def _knn_backward(ctx, grad_idx, grad_dist):
    grad_xyz, grad_new_xyz = _knn_dist_backward(grad_dist, *ctx.saved_tensors)
    return None, grad_xyz, None, grad_new_xyz, None


# dist is differentiable with respect to xyz and new_xyz (idx, an integer, is not),
# for torch.ops.customops.knn_query as for KNNQuery below.
torch.library.register_autograd("customops::knn_query", _knn_backward,
                                setup_context=_knn_setup_context)


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
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(xyz, new_xyz, idx)
        return idx, dist

    backward = staticmethod(_knn_backward)  # the op's own (above): dist to xyz and new_xyz

    @staticmethod
    def symbolic(g, nsample, xyz, offset, new_xyz=None, new_offset=None):
        from .symbolic import knn_query_node

        return knn_query_node(g, nsample, xyz, offset, new_xyz, new_offset)


def knn_query(nsample: int, xyz, offset, new_xyz=None, new_offset=None):
    """idx (m, nsample) int32 and dist (m, nsample) float32; see csrc/kernels/knn_query.h.
    xyz and new_xyz are float32 in any layout, offsets int32 or int64.  dist is
    differentiable with respect to xyz and new_xyz (0 where a query coincides
    with its neighbour); idx is not."""
    return KNNQuery.apply(nsample, xyz, offset, new_xyz, new_offset)


# --- deform_conv2d ------------------------------------------------------------


_INT32_MAX = 2**31 - 1


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

    _check_tensor(input, "deform_conv2d", "input", FLOAT_DTYPES)
    for name, t in (("weight", weight), ("offset", offset), ("mask", mask), ("bias", bias)):
        if t is not None:
            _check_tensor(t, "deform_conv2d", name, FLOAT_DTYPES)
            _check_same_dtype(t, "deform_conv2d", name, "input", input.dtype)
    inp, wt = input.shape, weight.shape
    check(len(inp) == 4, "input must be 4-D (N, C, H, W), got shape ", _shape_values(inp))
    check(len(wt) == 4, "weight must be 4-D (out_channels, C/groups, kh, kw), got shape ",
          _shape_values(wt))
    for name, values in (("stride", stride), ("padding", padding), ("dilation", dilation)):
        check(len(values) == 2, name, " must have 2 values (h, w), got ", _shape_values(values))
    n, c, h, w = inp
    check([n >= 0, c >= 1, h >= 1, w >= 1],
          "input must have N >= 0 and C, H, W >= 1, got shape ", _shape_values(inp))
    check([d >= 1 for d in wt], "weight dimensions must all be >= 1, got shape ",
          _shape_values(wt))
    for name, values, low in (("stride", stride, 1), ("padding", padding, 0),
                              ("dilation", dilation, 1)):
        check([v >= low for v in values], name, " must be >= ", low, ", got ",
              _shape_values(values))
    check(groups >= 1, "groups must be >= 1, got ", groups)
    check(offset_groups >= 1, "offset_groups must be >= 1, got ", offset_groups)
    for name, values in (("input shape", inp), ("weight shape", wt), ("stride", stride),
                         ("padding", padding), ("dilation", dilation)):
        check([v <= _INT32_MAX for v in values], name, " values must be at most ",
              _INT32_MAX, ", got ", _shape_values(values))
    check(h * w <= _INT32_MAX, "input plane H * W must be at most ", _INT32_MAX,
          ", got shape ", _shape_values(inp))
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
              _shape_values(output_shape))
    taps = kh * kw
    for name, t, expected, layout in (
            ("offset", offset, (n, 2 * offset_groups * taps, *out),
             "(N, 2*offset_groups*kh*kw, out_h, out_w)"),
            ("mask", mask, (n, offset_groups * taps, *out), "(N, offset_groups*kh*kw, out_h, out_w)"),
            ("bias", bias, (out_channels,), "(out_channels)")):
        if t is not None:
            check([t.dim() == len(expected)] + [a == b for a, b in zip(t.shape, expected)],
                  name, " must have shape ", layout, " = ", _shape_values(expected), ", got ",
                  _shape_values(t.shape))
    return input.new_empty(output_shape)


@torch.library.register_fake("customops::deform_conv2d_backward")
def _(grad_output, input, weight, offset, mask, stride, padding, dilation, groups, offset_groups):
    """The gradients have the shapes of their inputs; grad_mask that of the
    mask (N, offset_groups*kh*kw, out_h, out_w), given or not."""
    output = torch.ops.customops.deform_conv2d(input, weight, offset, mask, None, stride,
                                               padding, dilation, groups, offset_groups)
    _check_tensor(grad_output, "deform_conv2d_backward", "grad_output", FLOAT_DTYPES)
    _check_same_dtype(grad_output, "deform_conv2d_backward", "grad_output", "input", input.dtype)
    for a, b in zip(grad_output.shape, output.shape):
        torch._check(grad_output.dim() == 4 and a == b,
                     lambda: "deform_conv2d_backward: grad_output must have the shape of the "
                     f"output (N, out_channels, out_h, out_w) = {_shape(output)}, got "
                     f"{_shape(grad_output)}")
    n, _, out_h, out_w = output.shape
    taps = weight.shape[2] * weight.shape[3]
    return (input.new_empty(input.shape), weight.new_empty(weight.shape),
            offset.new_empty(offset.shape), input.new_empty((n, offset_groups * taps, out_h, out_w)),
            input.new_empty((weight.shape[0],)))


def _deform_conv2d_setup_context(ctx, inputs, output):
    input, weight, offset, mask, bias, *attrs = inputs
    ctx.save_for_backward(input, weight, offset, mask)
    ctx.attrs = attrs
    ctx.has_bias = bias is not None


def _deform_conv2d_backward(ctx, grad):
    input, weight, offset, mask = ctx.saved_tensors
    grads = torch.ops.customops.deform_conv2d_backward(grad, input, weight, offset, mask,
                                                       *ctx.attrs)
    grad_input, grad_weight, grad_offset, grad_mask, grad_bias = grads
    return (grad_input, grad_weight, grad_offset, grad_mask if mask is not None else None,
            grad_bias if ctx.has_bias else None, None, None, None, None, None)


torch.library.register_autograd("customops::deform_conv2d", _deform_conv2d_backward,
                                setup_context=_deform_conv2d_setup_context)


def _no_double_backward(ctx, *grads):
    raise RuntimeError(
        "customops::deform_conv2d_backward has no gradient: the second derivative of "
        "deform_conv2d (double backward, create_graph=True through it) is not implemented")


torch.library.register_autograd("customops::deform_conv2d_backward", _no_double_backward)


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
    # Said in this API's terms (offset_groups is not one of its arguments);
    # other ranks, and sizes that are traced or symbolic, are left to the op.
    channels = offset.shape[1] if offset.dim() == 4 else None
    if type(channels) is int and type(taps) is int and 0 < taps and channels < taps:
        raise RuntimeError(
            f"deform_conv2d: offset must have 2*offset_groups*kh*kw channels, a positive "
            f"multiple of 2*kh*kw = {taps} for the {weight.shape[2]}x{weight.shape[3]} kernel, "
            f"got offset of shape {_shape(offset)}")
    return torch.ops.customops.deform_conv2d(
        input, weight, offset, mask, bias, pair(stride), pair(padding), pair(dilation),
        groups, offset_groups,
    )


# --- DeformConv2d ---------------------------------------------------------------


class DeformConv2d(torch.nn.Module):
    """``torchvision.ops.DeformConv2d`` on our kernel: the same constructor,
    attributes, parameters (``weight``, ``bias``), initialisation and
    ``state_dict`` keys, so a torchvision checkpoint loads into it, and the same
    ``forward(input, offset, mask=None)``.  It exports (with
    ``customops.translations.TABLE``) to one ``custom::deform_conv2d`` node."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True):
        super().__init__()
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        pair = torch.nn.modules.utils._pair
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride = pair(kernel_size), pair(stride)
        self.padding, self.dilation = pair(padding), pair(dilation)
        self.weight = torch.nn.Parameter(
            torch.empty(out_channels, in_channels // groups, *self.kernel_size))
        self.bias = torch.nn.Parameter(torch.empty(out_channels)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # torchvision's (and nn.Conv2d's): the same draws, so a seed gives the same weights
        torch.nn.init.kaiming_uniform_(self.weight, a=5 ** 0.5)
        if self.bias is not None:
            fan_in = self.weight[0].numel()
            torch.nn.init.uniform_(self.bias, -fan_in ** -0.5, fan_in ** -0.5)

    def forward(self, input, offset, mask=None):
        return deform_conv2d(input, offset, self.weight, self.bias, stride=self.stride,
                             padding=self.padding, dilation=self.dilation, mask=mask)

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        s += f", padding={self.padding}" if self.padding != (0, 0) else ""
        s += f", dilation={self.dilation}" if self.dilation != (1, 1) else ""
        s += f", groups={self.groups}" if self.groups != 1 else ""
        return s + (", bias=False" if self.bias is None else "")
