// customops::ms_deform_attn and customops::ms_deform_attn_backward, its
// gradients (csrc/kernels/ms_deform_attn.h).
#include "../kernels/ms_deform_attn.h"

#include "binding.h"

namespace customops {
namespace {

constexpr const char* kOp = "ms_deform_attn";

// value, sampling_locations and attention_weights: one float dtype;
// spatial_shapes and level_start_index: int64, as in mmcv.
void check_tensors(const at::Tensor& value, const at::Tensor& spatial_shapes,
                   const at::Tensor& level_start_index, const at::Tensor& sampling_locations,
                   const at::Tensor& attention_weights) {
  check_tensor(value, kOp, "value", kFloatTypes);
  check_tensor(spatial_shapes, kOp, "spatial_shapes", {at::kLong});
  check_tensor(level_start_index, kOp, "level_start_index", {at::kLong});
  for (const auto& [t, name] : {std::pair{&sampling_locations, "sampling_locations"},
                                std::pair{&attention_weights, "attention_weights"}}) {
    check_tensor(*t, kOp, name, kFloatTypes);
    check_same_dtype(*t, kOp, name, "value", value.scalar_type());
  }
}

// Device, dtype, then (sizes being concrete) the shapes: the sizes, or
// nothing for symbolic sizes.
std::optional<MsDeformAttnParams> checks(const at::Tensor& value,
                                         const at::Tensor& spatial_shapes,
                                         const at::Tensor& level_start_index,
                                         const at::Tensor& sampling_locations,
                                         const at::Tensor& attention_weights,
                                         int64_t im2col_step) {
  check_tensors(value, spatial_shapes, level_start_index, sampling_locations, attention_weights);
  if (!all_concrete(value, spatial_shapes, level_start_index, sampling_locations,
                    attention_weights))
    return std::nullopt;
  return checked([&] {
    return ms_deform_attn_check_shapes(shape_of(value), shape_of(spatial_shapes),
                                       shape_of(level_start_index), shape_of(sampling_locations),
                                       shape_of(attention_weights), im2col_step);
  });
}

// The backward's: the forward's, then grad_output against the output.
std::optional<MsDeformAttnParams> backward_checks(
    const at::Tensor& grad, const at::Tensor& value, const at::Tensor& spatial_shapes,
    const at::Tensor& level_start_index, const at::Tensor& sampling_locations,
    const at::Tensor& attention_weights, int64_t im2col_step) {
  const auto p = checks(value, spatial_shapes, level_start_index, sampling_locations,
                        attention_weights, im2col_step);
  check_tensor(grad, "ms_deform_attn_backward", "grad_output", kFloatTypes);
  check_same_dtype(grad, "ms_deform_attn_backward", "grad_output", "value",
                   value.scalar_type());
  if (!p || !all_concrete(grad)) return std::nullopt;
  const Shape output{p->batch, p->queries, p->heads * p->channels};
  TORCH_CHECK(shape_of(grad) == output, "ms_deform_attn_backward: grad_output must have the "
              "shape of the output (N, Q, M * D) = ", to_text(output), ", got ",
              to_text(shape_of(grad)));
  return p;
}

std::optional<Shape> output_shape(const std::optional<MsDeformAttnParams>& p) {
  if (!p) return std::nullopt;
  return Shape{p->batch, p->queries, p->heads * p->channels};
}

}  // namespace

// The fake kernels' checks (customops/ops.py calls them through customops._C):
// the output's shape (N, Q, M * D), or nothing for symbolic sizes.  The
// values of spatial_shapes and level_start_index are seen at run time only.
std::optional<Shape> ms_deform_attn_fake_check(const at::Tensor& value,
                                               const at::Tensor& spatial_shapes,
                                               const at::Tensor& level_start_index,
                                               const at::Tensor& sampling_locations,
                                               const at::Tensor& attention_weights,
                                               int64_t im2col_step) {
  return output_shape(checks(value, spatial_shapes, level_start_index, sampling_locations,
                             attention_weights, im2col_step));
}

std::optional<Shape> ms_deform_attn_backward_fake_check(
    const at::Tensor& grad, const at::Tensor& value, const at::Tensor& spatial_shapes,
    const at::Tensor& level_start_index, const at::Tensor& sampling_locations,
    const at::Tensor& attention_weights, int64_t im2col_step) {
  return output_shape(backward_checks(grad, value, spatial_shapes, level_start_index,
                                      sampling_locations, attention_weights, im2col_step));
}

namespace {

// The checks that read spatial_shapes and level_start_index (small).
MsDeformAttnParams value_checks(const at::Tensor& value, const at::Tensor& spatial_shapes,
                                const at::Tensor& level_start_index,
                                const at::Tensor& sampling_locations,
                                const at::Tensor& attention_weights, int64_t im2col_step) {
  return checked([&] {
    return ms_deform_attn_check(shape_of(value), shape_of(spatial_shapes),
                                shape_of(level_start_index), shape_of(sampling_locations),
                                shape_of(attention_weights), im2col_step,
                                spatial_shapes.data_ptr<int64_t>(),
                                level_start_index.data_ptr<int64_t>());
  });
}

template <typename T>
void run_forward(const at::Tensor& value, const at::Tensor& spatial_shapes,
                 const at::Tensor& level_start_index, const at::Tensor& locations,
                 const at::Tensor& weights, const MsDeformAttnParams& p, at::Tensor& out) {
  checked([&] {  // refuses non-finite locations, which only the kernel reads
    ms_deform_attn(data_of<T>(value), spatial_shapes.data_ptr<int64_t>(),
                   level_start_index.data_ptr<int64_t>(), data_of<T>(locations),
                   data_of<T>(weights), p, data_of<T>(out), torch_parallel_for);
  });
}

// Any layout is accepted: validated first, then made contiguous (a copy only
// when it is not).  im2col_step is validated and otherwise unused (see the
// kernel's header).
at::Tensor ms_deform_attn_op(const at::Tensor& value, const at::Tensor& spatial_shapes,
                             const at::Tensor& level_start_index,
                             const at::Tensor& sampling_locations,
                             const at::Tensor& attention_weights, int64_t im2col_step) {
  checks(value, spatial_shapes, level_start_index, sampling_locations, attention_weights,
         im2col_step);
  const at::Tensor v = value.contiguous(), shapes = spatial_shapes.contiguous(),
                   starts = level_start_index.contiguous(),
                   loc = sampling_locations.contiguous(), a = attention_weights.contiguous();
  const MsDeformAttnParams p = value_checks(v, shapes, starts, loc, a, im2col_step);
  at::Tensor out = at::empty({p.batch, p.queries, p.heads * p.channels}, v.options());
  switch (value.scalar_type()) {
    case at::kDouble: run_forward<double>(v, shapes, starts, loc, a, p, out); break;
    case at::kHalf: run_forward<Half>(v, shapes, starts, loc, a, p, out); break;
    default: run_forward<float>(v, shapes, starts, loc, a, p, out);
  }
  return out;
}

template <typename T>
void run_backward(const at::Tensor& grad, const at::Tensor& value,
                  const at::Tensor& spatial_shapes, const at::Tensor& level_start_index,
                  const at::Tensor& locations, const at::Tensor& weights,
                  const MsDeformAttnParams& p, at::Tensor& grad_value,
                  at::Tensor& grad_locations, at::Tensor& grad_weights) {
  checked([&] {
    ms_deform_attn_backward(data_of<T>(grad), data_of<T>(value),
                            spatial_shapes.data_ptr<int64_t>(),
                            level_start_index.data_ptr<int64_t>(), data_of<T>(locations),
                            data_of<T>(weights), p, data_of<T>(grad_value),
                            data_of<T>(grad_locations), data_of<T>(grad_weights),
                            torch_parallel_for);
  });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> ms_deform_attn_backward_op(
    const at::Tensor& grad_output, const at::Tensor& value, const at::Tensor& spatial_shapes,
    const at::Tensor& level_start_index, const at::Tensor& sampling_locations,
    const at::Tensor& attention_weights, int64_t im2col_step) {
  backward_checks(grad_output, value, spatial_shapes, level_start_index, sampling_locations,
                  attention_weights, im2col_step);
  const at::Tensor dy = grad_output.contiguous(), v = value.contiguous(),
                   shapes = spatial_shapes.contiguous(), starts = level_start_index.contiguous(),
                   loc = sampling_locations.contiguous(), a = attention_weights.contiguous();
  const MsDeformAttnParams p = value_checks(v, shapes, starts, loc, a, im2col_step);
  at::Tensor grad_value = at::empty_like(v), grad_locations = at::empty_like(loc),
             grad_weights = at::empty_like(a);
  switch (value.scalar_type()) {
    case at::kDouble:
      run_backward<double>(dy, v, shapes, starts, loc, a, p, grad_value, grad_locations,
                           grad_weights);
      break;
    case at::kHalf:
      run_backward<Half>(dy, v, shapes, starts, loc, a, p, grad_value, grad_locations,
                         grad_weights);
      break;
    default:
      run_backward<float>(dy, v, shapes, starts, loc, a, p, grad_value, grad_locations,
                          grad_weights);
  }
  return {grad_value, grad_locations, grad_weights};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(customops, m) {
  m.def(
      "ms_deform_attn(Tensor value, Tensor spatial_shapes, Tensor level_start_index, "
      "Tensor sampling_locations, Tensor attention_weights, int im2col_step=64) -> Tensor");
  m.def(
      "ms_deform_attn_backward(Tensor grad_output, Tensor value, Tensor spatial_shapes, "
      "Tensor level_start_index, Tensor sampling_locations, Tensor attention_weights, "
      "int im2col_step=64) -> (Tensor grad_value, Tensor grad_sampling_locations, "
      "Tensor grad_attention_weights)");
}

TORCH_LIBRARY_IMPL(customops, CPU, m) {
  m.impl("ms_deform_attn", &ms_deform_attn_op);
  m.impl("ms_deform_attn_backward", &ms_deform_attn_backward_op);
}

}  // namespace customops
