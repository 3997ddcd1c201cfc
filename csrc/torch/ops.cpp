// PyTorch binding: the customops:: operators (TORCH_LIBRARY) and the seeds'
// pybind11-style function my_add, both calling the kernels in ../kernels.
#include <ATen/Parallel.h>
#include <torch/extension.h>

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "../kernels/deform_conv2d.h"
#include "../kernels/knn_query.h"
#include "../kernels/my_add.h"

namespace customops {
namespace {

Shape shape_of(const at::Tensor& t) { return Shape(t.sizes().begin(), t.sizes().end()); }

OptionalShape shape_of(const std::optional<at::Tensor>& t) {
  return t ? OptionalShape(shape_of(*t)) : std::nullopt;
}

// "Float", "Int or Long", "Float, Double or Half": c10's names, as torch prints them.
std::string dtype_names(std::initializer_list<at::ScalarType> dtypes) {
  std::ostringstream out;
  size_t i = 0;
  for (const at::ScalarType dtype : dtypes) {
    out << (i == 0 ? "" : i + 1 == dtypes.size() ? " or " : ", ") << dtype;
    ++i;
  }
  return out.str();
}

// my_add and deform_conv2d: float16 is computed in float32 and rounded once.
constexpr std::initializer_list<at::ScalarType> kFloatTypes = {at::kFloat, at::kDouble,
                                                              at::kHalf};

// The tensor checks that the pure kernels cannot do: device and dtype.
void check_tensor(const at::Tensor& t, const char* op, const char* name,
                  std::initializer_list<at::ScalarType> dtypes) {
  TORCH_CHECK(t.device().is_cpu(), op, ": ", name, " must be a CPU tensor, got ", t.device());
  TORCH_CHECK(std::find(dtypes.begin(), dtypes.end(), t.scalar_type()) != dtypes.end(), op,
              ": ", name, " must be ", dtype_names(dtypes), ", got ", t.scalar_type());
}

// Inputs that must share the dtype of another: "b must have the dtype of a, Float, got Double".
void check_same_dtype(const at::Tensor& t, const char* op, const char* name,
                      const char* reference, at::ScalarType dtype) {
  TORCH_CHECK(t.scalar_type() == dtype, op, ": ", name, " must have the dtype of ", reference,
              ", ", dtype, ", got ", t.scalar_type());
}

void torch_parallel_for(int64_t n, int64_t grain,
                        const std::function<void(int64_t, int64_t)>& body) {
  at::parallel_for(0, n, grain, body);
}

// Runs a kernel's argument check, reporting its message through TORCH_CHECK.
template <typename Check>
auto checked(Check&& check_fn) {
  try {
    return check_fn();
  } catch (const std::invalid_argument& error) {
    TORCH_CHECK(false, error.what());
  }
}

// The kernels' pointer type for a tensor's data; at::Half holds the same
// 16 bits as the kernels' Half.
template <typename T>
T* data_of(const at::Tensor& t) {
  if constexpr (std::is_same_v<T, Half>) {
    static_assert(sizeof(at::Half) == sizeof(Half));
    return reinterpret_cast<Half*>(t.data_ptr<at::Half>());
  } else {
    return t.data_ptr<T>();
  }
}

template <typename T>
void my_add_as(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out) {
  my_add(data_of<T>(a), data_of<T>(b), a.numel(), data_of<T>(out), torch_parallel_for);
}

// Any layout is accepted, as torchvision's ops do: validated first, then
// made contiguous (a copy only when it is not).
at::Tensor my_add_op(const at::Tensor& a, const at::Tensor& b) {
  check_tensor(a, "my_add", "a", kFloatTypes);
  check_tensor(b, "my_add", "b", kFloatTypes);
  check_same_dtype(b, "my_add", "b", "a", a.scalar_type());
  checked([&] { my_add_check(shape_of(a), shape_of(b)); });
  const at::Tensor a_dense = a.contiguous(), b_dense = b.contiguous();
  at::Tensor out = at::empty_like(a_dense);
  switch (a.scalar_type()) {
    case at::kDouble: my_add_as<double>(a_dense, b_dense, out); break;
    case at::kHalf: my_add_as<Half>(a_dense, b_dense, out); break;
    default: my_add_as<float>(a_dense, b_dense, out);
  }
  return out;
}

// Offsets may come as int64 (Pointcept passes either); the kernel reads
// int32, which every valid offset fits since idx itself is int32.
at::Tensor int32_offsets(const at::Tensor& offset, const char* name) {
  if (offset.scalar_type() == at::kInt) return offset.contiguous();
  const at::Tensor narrow = offset.to(at::kInt).contiguous();
  const at::Tensor lost = narrow.to(at::kLong).ne(offset).flatten().nonzero();
  if (lost.numel() > 0) {
    const int64_t i = lost[0][0].item<int64_t>();
    TORCH_CHECK(false, "knn_query: ", name, " must hold int32 values (idx is int32), got ", name,
                "[", i, "] = ", offset.flatten()[i].item<int64_t>());
  }
  return narrow;
}

std::tuple<at::Tensor, at::Tensor> knn_query_op(int64_t nsample, const at::Tensor& xyz,
                                                const at::Tensor& offset_in,
                                                const std::optional<at::Tensor>& new_xyz_in,
                                                const std::optional<at::Tensor>& new_offset_in) {
  check_tensor(xyz, "knn_query", "xyz", {at::kFloat});
  check_tensor(offset_in, "knn_query", "offset", {at::kInt, at::kLong});
  if (new_xyz_in) check_tensor(*new_xyz_in, "knn_query", "new_xyz", {at::kFloat});
  if (new_offset_in) {
    check_tensor(*new_offset_in, "knn_query", "new_offset", {at::kInt, at::kLong});
  }
  // The checks read the offsets' values, so those come first (they are
  // small); the points are copied only once the call is known to be valid.
  const at::Tensor offset = int32_offsets(offset_in, "offset");
  const std::optional<at::Tensor> new_offset =
      new_offset_in ? std::optional(int32_offsets(*new_offset_in, "new_offset")) : std::nullopt;
  checked([&] {
    knn_query_check(shape_of(xyz), shape_of(offset), offset.data_ptr<int32_t>(),
                    shape_of(new_xyz_in), shape_of(new_offset),
                    new_offset ? new_offset->data_ptr<int32_t>() : nullptr, nsample);
  });
  const at::Tensor points = xyz.contiguous();
  const at::Tensor queries = new_xyz_in ? new_xyz_in->contiguous() : points;
  const at::Tensor& query_offset = new_offset ? *new_offset : offset;
  const int64_t m = queries.size(0);
  at::Tensor idx = at::empty({m, nsample}, xyz.options().dtype(at::kInt));
  at::Tensor dist = at::empty({m, nsample}, xyz.options());
  checked([&] {  // refuses non-finite points, which only the kernel reads
    knn_query(points.data_ptr<float>(), offset.data_ptr<int32_t>(), points.size(0),
              queries.data_ptr<float>(), query_offset.data_ptr<int32_t>(), m, offset.size(0),
              nsample, idx.data_ptr<int32_t>(), dist.data_ptr<float>(), torch_parallel_for);
  });
  return {idx, dist};
}

// deform_conv2d takes float32, float64 and float16 (as torchvision does on the
// CPU), all inputs of one dtype, in any layout.  The messages match the fake
// kernel's in customops/ops.py.
void check_deform_tensor(const at::Tensor& t, const char* name, at::ScalarType dtype) {
  check_tensor(t, "deform_conv2d", name, kFloatTypes);
  check_same_dtype(t, "deform_conv2d", name, "input", dtype);
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
  check_tensor(input, "deform_conv2d", "input", kFloatTypes);
  const at::ScalarType dtype = input.scalar_type();
  check_deform_tensor(weight, "weight", dtype);
  check_deform_tensor(offset, "offset", dtype);
  if (mask) check_deform_tensor(*mask, "mask", dtype);
  if (bias) check_deform_tensor(*bias, "bias", dtype);
  const DeformConv2dParams p = checked([&] {
    return deform_conv2d_check(shape_of(input), shape_of(weight), shape_of(offset),
                               shape_of(mask), shape_of(bias), Shape(stride.vec()),
                               Shape(padding.vec()), Shape(dilation.vec()), groups,
                               offset_groups);
  });
  // What the kernel reads: contiguous (a copy only when the tensor is not).
  const auto dense = [](const std::optional<at::Tensor>& t) {
    return t ? std::optional<at::Tensor>(t->contiguous()) : std::nullopt;
  };
  const at::Tensor x = input.contiguous(), w = weight.contiguous(), o = offset.contiguous();
  const std::optional<at::Tensor> m = dense(mask), b = dense(bias);
  at::Tensor out = at::empty({p.batch, p.out_channels, p.out_h, p.out_w}, x.options());
  switch (dtype) {
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
  check_tensor(input, "deform_conv2d", "input", kFloatTypes);
  const at::ScalarType dtype = input.scalar_type();
  check_deform_tensor(weight, "weight", dtype);
  check_deform_tensor(offset, "offset", dtype);
  if (mask) check_deform_tensor(*mask, "mask", dtype);
  const DeformConv2dParams p = checked([&] {
    return deform_conv2d_check(shape_of(input), shape_of(weight), shape_of(offset),
                               shape_of(mask), std::nullopt, Shape(stride.vec()),
                               Shape(padding.vec()), Shape(dilation.vec()), groups,
                               offset_groups);
  });
  check_tensor(grad, "deform_conv2d_backward", "grad_output", kFloatTypes);
  check_same_dtype(grad, "deform_conv2d_backward", "grad_output", "input", dtype);
  const Shape output{p.batch, p.out_channels, p.out_h, p.out_w};
  TORCH_CHECK(shape_of(grad) == output, "deform_conv2d_backward: grad_output must have the "
              "shape of the output (N, out_channels, out_h, out_w) = ", to_text(output),
              ", got ", to_text(shape_of(grad)));
  const at::Tensor dy = grad.contiguous(), x = input.contiguous(), w = weight.contiguous(),
                   o = offset.contiguous();
  const std::optional<at::Tensor> m =
      mask ? std::optional<at::Tensor>(mask->contiguous()) : std::nullopt;
  at::Tensor grad_input = at::empty_like(x), grad_weight = at::empty_like(w),
             grad_offset = at::empty_like(o),
             grad_mask = at::empty({p.batch, p.offset_groups * p.kernel_h * p.kernel_w, p.out_h,
                                    p.out_w}, x.options()),
             grad_bias = at::empty({p.out_channels}, x.options());
  switch (dtype) {
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

// Schemas: one per op, named as in the ONNX contract where the seeds allow.
TORCH_LIBRARY(customops, m) {
  m.def("my_add(Tensor a, Tensor b) -> Tensor");
  m.def(
      "knn_query(int nsample, Tensor xyz, Tensor offset, Tensor? new_xyz=None, "
      "Tensor? new_offset=None) -> (Tensor idx, Tensor dist)");
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
  m.impl("my_add", &my_add_op);
  m.impl("knn_query", &knn_query_op);
  m.impl("deform_conv2d", &deform_conv2d_op);
  m.impl("deform_conv2d_backward", &deform_conv2d_backward_op);
}

}  // namespace customops

// The seeds' style: a plain pybind11 function (customops._C.my_add).  It is
// callable from Python but invisible to torch.export and to torch.library,
// which is why the operators above exist as well.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("my_add", &customops::my_add_op, "2 * a + b (pybind11 binding)");
}
