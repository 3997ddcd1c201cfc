"""The PyTorch side of the operators: torch.ops.customops.* plus Python APIs.

Loading this module loads the compiled extension ``customops._C``, whose
``TORCH_LIBRARY_FRAGMENT(customops, m)`` blocks (csrc/torch/<op>.cpp) define
the operators, and registers what the C++ side cannot: fake (meta)
implementations so that torch.export and torch.compile can trace the ops
without running them, and the gradients.
"""

from __future__ import annotations

import torch

from . import _C  # registers torch.ops.customops.*; the fake kernels call its checks

__all__ = ["my_add", "knn_query", "KNNQuery", "deform_conv2d", "DeformConv2d", "ms_deform_attn",
           "MSDeformAttnFunction"]


# --- fake kernels -------------------------------------------------------------
#
# A fake (meta) implementation runs instead of the kernel when torch.export or
# torch.compile trace a call.  Ours run the op's own C++ checks, those that
# need no tensor data (device, dtype, and, when every size is concrete, shapes
# and attributes), through customops._C: the same code, so the same order and
# words, and a bad call fails while tracing, not later at run time or in ONNX
# Runtime.  tests/test_fake.py holds fake and real to the same messages.
#
# With symbolic sizes (dynamic shapes) the C++ checks cannot run: the fake
# then states the equalities its output shape rests on (b has a's shape, a
# point has 3 coordinates, ...) with torch._check, so that export refuses
# dynamic dimensions that break them ("must always be equal", "specialized it
# to be a constant") instead of building a graph the kernel refuses at run
# time.  Inequalities (a kernel that fits the padded input, size limits) are
# left to run time: stated on a symbol, they would narrow its range.


def _all_int(*values):
    """True when attributes are plain ints (not SymInts), as the C++ checks take them."""
    return all(type(v) is int for v in values)


def _check_shape(t, expected, message):
    """torch._check that t has the shape `expected`, one size at a time (a
    symbolic size is then related to another, never guarded as a whole)."""
    torch._check(t.dim() == len(expected), lambda: message)
    for size, want in zip(t.shape, expected):
        torch._check(size == want, lambda: message)


# --- my_add -----------------------------------------------------------------


def my_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """2 * a + b for CPU tensors of one shape and one dtype (float32, float64 or
    float16, computed in float32), in any layout; the result is contiguous."""
    return torch.ops.customops.my_add(a, b)


@torch.library.register_fake("customops::my_add")
def _(a, b):
    if _C.my_add_fake_check(a, b) is None:  # symbolic sizes
        _check_shape(b, a.shape, "my_add: b must have the shape of a")
    return a.new_empty(a.shape)


def _my_add_backward(ctx, grad):
    return 2 * grad, grad


torch.library.register_autograd("customops::my_add", _my_add_backward)


# --- knn_query ----------------------------------------------------------------


@torch.library.register_fake("customops::knn_query")
def _(nsample, xyz, offset, new_xyz=None, new_offset=None):
    # The offsets' values are only seen at run time.
    concrete = _all_int(nsample) and _C.knn_query_fake_check(nsample, xyz, offset, new_xyz,
                                                             new_offset) is not None
    if not concrete:
        torch._check((new_xyz is None) == (new_offset is None),
                     lambda: "knn_query: new_xyz and new_offset must be given together")
        _check_shape(xyz, (xyz.shape[0], 3), "knn_query: xyz must have shape (n, 3)")
        if new_xyz is not None:
            _check_shape(new_xyz, (new_xyz.shape[0], 3), "knn_query: new_xyz must have shape (m, 3)")
            _check_shape(new_offset, offset.shape,
                         "knn_query: new_offset must have the shape of offset")
    shape = ((new_xyz if new_xyz is not None else xyz).shape[0], nsample)
    return xyz.new_empty(shape, dtype=torch.int32), xyz.new_empty(shape)


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


def _deform_conv2d_shape(fake_check, input, weight, offset, mask, stride, padding, dilation,
                         groups, offset_groups):
    """The output's shape (N, out_channels, out_h, out_w).  `fake_check()`, the
    op's C++ check through customops._C, gives it when the attributes are ints
    and every size is concrete; otherwise (None) it comes from
    deform_conv2d_check's formula (csrc/kernels/deform_conv2d.cpp), with the
    equalities it rests on."""
    if _all_int(*stride, *padding, *dilation, groups, offset_groups):
        shape = fake_check()
        if shape is not None:
            return shape
    torch._check(input.dim() == 4 and weight.dim() == 4,
                 lambda: "deform_conv2d: input and weight must be 4-D")
    (n, c, h, w), (out_channels, group_channels, kh, kw) = input.shape, weight.shape
    torch._check(c == group_channels * groups,
                 lambda: "deform_conv2d: weight.shape[1] must be C/groups")
    torch._check(c % offset_groups == 0,
                 lambda: "deform_conv2d: input channels C must be divisible by offset_groups")
    out = [(size + 2 * p - d * (k - 1) - 1) // s + 1
           for size, k, s, p, d in zip((h, w), (kh, kw), stride, padding, dilation)]
    taps = kh * kw
    _check_shape(offset, (n, 2 * offset_groups * taps, *out),
                 "deform_conv2d: offset must have shape (N, 2*offset_groups*kh*kw, out_h, out_w)")
    if mask is not None:
        _check_shape(mask, (n, offset_groups * taps, *out),
                     "deform_conv2d: mask must have shape (N, offset_groups*kh*kw, out_h, out_w)")
    return (n, out_channels, *out)


# The bias and grad_output relations below are already checked in C++ when
# sizes are concrete; stated again, they hold trivially.
@torch.library.register_fake("customops::deform_conv2d")
def _(input, weight, offset, mask, bias, stride, padding, dilation, groups, offset_groups):
    attrs = (stride, padding, dilation, groups, offset_groups)
    shape = _deform_conv2d_shape(
        lambda: _C.deform_conv2d_fake_check(input, weight, offset, mask, bias, *attrs),
        input, weight, offset, mask, *attrs)
    if bias is not None:
        _check_shape(bias, shape[1:2], "deform_conv2d: bias must have shape (out_channels)")
    return input.new_empty(shape)


@torch.library.register_fake("customops::deform_conv2d_backward")
def _(grad_output, input, weight, offset, mask, stride, padding, dilation, groups, offset_groups):
    """The gradients have the shapes of their inputs; grad_mask that of the
    mask (N, offset_groups*kh*kw, out_h, out_w), given or not."""
    attrs = (stride, padding, dilation, groups, offset_groups)
    shape = _deform_conv2d_shape(
        lambda: _C.deform_conv2d_backward_fake_check(grad_output, input, weight, offset, mask,
                                                     *attrs),
        input, weight, offset, mask, *attrs)
    _check_shape(grad_output, shape, "deform_conv2d_backward: grad_output must have the "
                 "shape of the output (N, out_channels, out_h, out_w)")
    n, _, out_h, out_w = shape
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


def _no_double_backward(op):
    """The gradient of customops::<op>_backward: refused, with the reason."""
    def refuse(ctx, *grads):
        raise RuntimeError(
            f"customops::{op}_backward has no gradient: the second derivative of "
            f"{op} (double backward, create_graph=True through it) is not implemented")
    return refuse


torch.library.register_autograd("customops::deform_conv2d_backward",
                                _no_double_backward("deform_conv2d"))


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
            f"got offset of shape {list(offset.shape)}")
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


# --- ms_deform_attn -------------------------------------------------------------


def _ms_deform_attn_shape(fake_check, value, spatial_shapes, level_start_index,
                          sampling_locations, attention_weights, im2col_step):
    """The output's shape (N, Q, M * D).  `fake_check()`, the op's C++ check
    through customops._C, gives it when im2col_step is an int and every size
    is concrete; otherwise (None) it comes from the shapes, with the
    equalities ms_deform_attn_check_shapes (csrc/kernels/ms_deform_attn.cpp)
    rests on.  The values of spatial_shapes and level_start_index are only
    seen at run time."""
    if _all_int(im2col_step):
        shape = fake_check()
        if shape is not None:
            return shape
    torch._check(value.dim() == 4, lambda: "ms_deform_attn: value must be 4-D (N, S, M, D)")
    torch._check(sampling_locations.dim() == 6,
                 lambda: "ms_deform_attn: sampling_locations must be 6-D (N, Q, M, L, P, 2)")
    n, _, heads, channels = value.shape
    levels = spatial_shapes.shape[0]
    _check_shape(spatial_shapes, (levels, 2), "ms_deform_attn: spatial_shapes must have shape (L, 2)")
    _check_shape(level_start_index, (levels,),
                 "ms_deform_attn: level_start_index must have shape (L)")
    queries, points = sampling_locations.shape[1], sampling_locations.shape[4]
    _check_shape(sampling_locations, (n, queries, heads, levels, points, 2),
                 "ms_deform_attn: sampling_locations must have shape (N, Q, M, L, P, 2)")
    _check_shape(attention_weights, (n, queries, heads, levels, points),
                 "ms_deform_attn: attention_weights must have shape (N, Q, M, L, P)")
    return (n, queries, heads * channels)


@torch.library.register_fake("customops::ms_deform_attn")
def _(value, spatial_shapes, level_start_index, sampling_locations, attention_weights,
      im2col_step=64):
    args = (value, spatial_shapes, level_start_index, sampling_locations, attention_weights,
            im2col_step)
    return value.new_empty(_ms_deform_attn_shape(lambda: _C.ms_deform_attn_fake_check(*args),
                                                 *args))


@torch.library.register_fake("customops::ms_deform_attn_backward")
def _(grad_output, value, spatial_shapes, level_start_index, sampling_locations,
      attention_weights, im2col_step=64):
    """The gradients have the shapes of value, sampling_locations and attention_weights."""
    args = (value, spatial_shapes, level_start_index, sampling_locations, attention_weights,
            im2col_step)
    shape = _ms_deform_attn_shape(
        lambda: _C.ms_deform_attn_backward_fake_check(grad_output, *args), *args)
    _check_shape(grad_output, shape, "ms_deform_attn_backward: grad_output must have the "
                 "shape of the output (N, Q, M * D)")
    return (value.new_empty(value.shape), sampling_locations.new_empty(sampling_locations.shape),
            attention_weights.new_empty(attention_weights.shape))


def _ms_deform_attn_setup_context(ctx, inputs, output):
    *tensors, im2col_step = inputs
    ctx.save_for_backward(*tensors)
    ctx.im2col_step = im2col_step


def _ms_deform_attn_backward(ctx, grad):
    value, spatial_shapes, level_start_index, locations, weights = ctx.saved_tensors
    grad_value, grad_locations, grad_weights = torch.ops.customops.ms_deform_attn_backward(
        grad, value, spatial_shapes, level_start_index, locations, weights, ctx.im2col_step)
    return grad_value, None, None, grad_locations, grad_weights, None


torch.library.register_autograd("customops::ms_deform_attn", _ms_deform_attn_backward,
                                setup_context=_ms_deform_attn_setup_context)
torch.library.register_autograd("customops::ms_deform_attn_backward",
                                _no_double_backward("ms_deform_attn"))


def ms_deform_attn(value, spatial_shapes, level_start_index, sampling_locations,
                   attention_weights, im2col_step: int = 64):
    """Multi-scale deformable attention (csrc/kernels/ms_deform_attn.h): value
    (N, S, M, D), spatial_shapes int64 (L, 2), level_start_index int64 (L),
    sampling_locations (N, Q, M, L, P, 2) in [0, 1], attention_weights
    (N, Q, M, L, P) -> (N, Q, M * D).  Differentiable with respect to value,
    sampling_locations and attention_weights.  im2col_step is checked (>= 1)
    and otherwise unused: in mmcv it only batches the CUDA kernel's work."""
    return torch.ops.customops.ms_deform_attn(value, spatial_shapes, level_start_index,
                                              sampling_locations, attention_weights, im2col_step)


class MSDeformAttnFunction(torch.autograd.Function):
    """Drop-in for Deformable DETR's ``MSDeformAttnFunction`` and mmcv's
    ``MultiScaleDeformableAttnFunction``: the same ``apply(value,
    spatial_shapes, level_start_index, sampling_locations, attention_weights,
    im2col_step)``, on our kernel, and it exports to one
    ``custom::ms_deform_attn`` node both ways (``symbolic`` for the
    TorchScript exporter; the torch.export one meets the op itself)."""

    @staticmethod
    def forward(ctx, value, spatial_shapes, level_start_index, sampling_locations,
                attention_weights, im2col_step):
        inputs = (value, spatial_shapes, level_start_index, sampling_locations,
                  attention_weights, im2col_step)
        output = torch.ops.customops.ms_deform_attn(*inputs)
        _ms_deform_attn_setup_context(ctx, inputs, output)
        return output

    backward = staticmethod(_ms_deform_attn_backward)

    @staticmethod
    def symbolic(g, value, spatial_shapes, level_start_index, sampling_locations,
                 attention_weights, im2col_step):
        from .symbolic import ms_deform_attn_node

        return ms_deform_attn_node(g, value, spatial_shapes, level_start_index,
                                   sampling_locations, attention_weights, im2col_step)
