// customops::deform_conv2d and customops::deform_conv2d_backward, its
// gradients (csrc/kernels/deform_conv2d.h); one file, as torchvision keeps them.
#include "../kernels/deform_conv2d.h"

#include "binding.h"

namespace customops {
namespace {

// deform_conv2d takes float32, float64 and float16 (as torchvision does on the
// CPU), all inputs of one dtype, in any layout.
void check_deform_tensor(const at::Tensor& t, const char* name, at::ScalarType dtype) {
  check_tensor(t, "deform_conv2d", name, kFloatTypes);
  check_same_dtype(t, "deform_conv2d", name, "input", dtype);
}

// Device and dtype, then (sizes being concrete) deform_conv2d_check: the
// parameters of the call, or nothing for symbolic sizes.
std::optional<DeformConv2dParams> checks(const at::Tensor& input, const at::Tensor& weight,
                                         const at::Tensor& offset,
                                         const std::optional<at::Tensor>& mask,
                                         const std::optional<at::Tensor>& bias,
                                         at::IntArrayRef stride, at::IntArrayRef padding,
                                         at::IntArrayRef dilation, int64_t groups,
                                         int64_t offset_groups) {
  check_tensor(input, "deform_conv2d", "input", kFloatTypes);
  const at::ScalarType dtype = input.scalar_type();
  check_deform_tensor(weight, "weight", dtype);
  check_deform_tensor(offset, "offset", dtype);
  if (mask) check_deform_tensor(*mask, "mask", dtype);
  if (bias) check_deform_tensor(*bias, "bias", dtype);
  if (!all_concrete(input, weight, offset, mask, bias)) return std::nullopt;
  return checked([&] {
    return deform_conv2d_check(shape_of(input), shape_of(weight), shape_of(offset),
                               shape_of(mask), shape_of(bias), Shape(stride.vec()),
                               Shape(padding.vec()), Shape(dilation.vec()), groups,
                               offset_groups);
  });
}

// The backward's: the forward's (without bias), then grad_output against the output.
std::optional<DeformConv2dParams> backward_checks(
    const at::Tensor& grad, const at::Tensor& input, const at::Tensor& weight,
    const at::Tensor& offset, const std::optional<at::Tensor>& mask, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups, int64_t offset_groups) {
  const std::optional<DeformConv2dParams> p = checks(
      input, weight, offset, mask, std::nullopt, stride, padding, dilation, groups, offset_groups);
  check_tensor(grad, "deform_conv2d_backward", "grad_output", kFloatTypes);
  check_same_dtype(grad, "deform_conv2d_backward", "grad_output", "input", input.scalar_type());
  if (!p || !all_concrete(grad)) return std::nullopt;
  const Shape output{p->batch, p->out_channels, p->out_h, p->out_w};
  TORCH_CHECK(shape_of(grad) == output, "deform_conv2d_backward: grad_output must have the "
              "shape of the output (N, out_channels, out_h, out_w) = ", to_text(output),
              ", got ", to_text(shape_of(grad)));
  return p;
}

std::optional<Shape> output_shape(const std::optional<DeformConv2dParams>& p) {
  if (!p) return std::nullopt;
  return Shape{p->batch, p->out_channels, p->out_h, p->out_w};
}

}  // namespace

// The fake kernels' checks (customops/ops.py calls them through customops._C):
// the output's shape (N, out_channels, out_h, out_w), or nothing for symbolic sizes.
std::optional<Shape> deform_conv2d_fake_check(
    const at::Tensor& input, const at::Tensor& weight, const at::Tensor& offset,
    const std::optional<at::Tensor>& mask, const std::optional<at::Tensor>& bias,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
    int64_t offset_groups) {
  return output_shape(
      checks(input, weight, offset, mask, bias, stride, padding, dilation, groups, offset_groups));
}

std::optional<Shape> deform_conv2d_backward_fake_check(
    const at::Tensor& grad, const at::Tensor& input, const at::Tensor& weight,
    const at::Tensor& offset, const std::optional<at::Tensor>& mask, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups, int64_t offset_groups) {
  return output_shape(backward_checks(grad, input, weight, offset, mask, stride, padding,
                                      dilation, groups, offset_groups));
}

namespace {

std::optional<at::Tensor> dense(const std::optional<at::Tensor>& t) {
  return t ? std::optional<at::Tensor>(t->contiguous()) : std::nullopt;
}

template <typename T>
void run_deform_conv2d(const at::Tensor& input, const at::Tensor& weight,
                       const at::Tensor& offset, const std::optional<at::Tensor>& mask,
                       const std::optional<at::Tensor>& bias, const DeformConv2dParams& p,
                       at::Tensor& out) {
  deform_conv2d(data_of<T>(input), data_of<T>(weight), data_of<T>(offset),
                mask ? data_of<T>(*mask) : nullptr, bias ? data_of<T>(*bias) : nullptr, p,
                data_of<T>(out), torch_parallel_for);
}

at::Tensor deform_conv2d_op(const at::Tensor& input, const at::Tensor& weight,
                            const at::Tensor& offset, const std::optional<at::Tensor>& mask,
                            const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                            at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
                            int64_t offset_groups) {
  const DeformConv2dParams p =
      *checks(input, weight, offset, mask, bias, stride, padding, dilation, groups, offset_groups);
  // What the kernel reads: contiguous (a copy only when the tensor is not).
  const at::Tensor x = input.contiguous(), w = weight.contiguous(), o = offset.contiguous();
  const std::optional<at::Tensor> m = dense(mask), b = dense(bias);
  at::Tensor out = at::empty({p.batch, p.out_channels, p.out_h, p.out_w}, x.options());
  switch (input.scalar_type()) {
    case at::kDouble: run_deform_conv2d<double>(x, w, o, m, b, p, out); break;
    case at::kHalf: run_deform_conv2d<Half>(x, w, o, m, b, p, out); break;
    default: run_deform_conv2d<float>(x, w, o, m, b, p, out);
  }
  return out;
}

template <typename T>
void run_deform_conv2d_backward(const at::Tensor& grad, const at::Tensor& input,
                                const at::Tensor& weight, const at::Tensor& offset,
                                const std::optional<at::Tensor>& mask,
                                const DeformConv2dParams& p, at::Tensor& grad_input,
                                at::Tensor& grad_weight, at::Tensor& grad_offset,
                                at::Tensor& grad_mask, at::Tensor& grad_bias) {
  deform_conv2d_backward(data_of<T>(grad), data_of<T>(input), data_of<T>(weight),
                         data_of<T>(offset), mask ? data_of<T>(*mask) : nullptr, p,
                         data_of<T>(grad_input), data_of<T>(grad_weight),
                         data_of<T>(grad_offset), data_of<T>(grad_mask), data_of<T>(grad_bias),
                         torch_parallel_for);
}

// The gradients of deform_conv2d with respect to input, weight, offset,
// mask (to a mask of ones when none is given) and bias.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> deform_conv2d_backward_op(
    const at::Tensor& grad, const at::Tensor& input, const at::Tensor& weight,
    const at::Tensor& offset, const std::optional<at::Tensor>& mask, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups, int64_t offset_groups) {
  const DeformConv2dParams p = *backward_checks(grad, input, weight, offset, mask, stride,
                                                padding, dilation, groups, offset_groups);
  const at::Tensor dy = grad.contiguous(), x = input.contiguous(), w = weight.contiguous(),
                   o = offset.contiguous();
  const std::optional<at::Tensor> m = dense(mask);
  at::Tensor grad_input = at::empty_like(x), grad_weight = at::empty_like(w),
             grad_offset = at::empty_like(o),
             grad_mask = at::empty({p.batch, p.offset_groups * p.kernel_h * p.kernel_w, p.out_h,
                                    p.out_w}, x.options()),
             grad_bias = at::empty({p.out_channels}, x.options());
  switch (input.scalar_type()) {
    case at::kDouble:
      run_deform_conv2d_backward<double>(dy, x, w, o, m, p, grad_input, grad_weight,
                                         grad_offset, grad_mask, grad_bias);
      break;
    case at::kHalf:
      run_deform_conv2d_backward<Half>(dy, x, w, o, m, p, grad_input, grad_weight, grad_offset,
                                       grad_mask, grad_bias);
      break;
    default:
      run_deform_conv2d_backward<float>(dy, x, w, o, m, p, grad_input, grad_weight, grad_offset,
                                        grad_mask, grad_bias);
  }
  return {grad_input, grad_weight, grad_offset, grad_mask, grad_bias};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(customops, m) {
  m.def(
      "deform_conv2d(Tensor input, Tensor weight, Tensor offset, Tensor? mask, Tensor? bias, "
      "int[2] stride, int[2] padding, int[2] dilation, int groups, int offset_groups) -> Tensor");
  m.def(
      "deform_conv2d_backward(Tensor grad_output, Tensor input, Tensor weight, Tensor offset, "
      "Tensor? mask, int[2] stride, int[2] padding, int[2] dilation, int groups, "
      "int offset_groups) -> (Tensor grad_input, Tensor grad_weight, Tensor grad_offset, "
      "Tensor grad_mask, Tensor grad_bias)");
}

TORCH_LIBRARY_IMPL(customops, CPU, m) {
  m.impl("deform_conv2d", &deform_conv2d_op);
  m.impl("deform_conv2d_backward", &deform_conv2d_backward_op);
}

}  // namespace customops
