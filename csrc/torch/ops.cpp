// PyTorch binding: the customops:: operators (TORCH_LIBRARY) and the seeds'
// pybind11-style function my_add, both calling the kernels in ../kernels.
#include <ATen/Parallel.h>
#include <torch/extension.h>

#include <optional>
#include <stdexcept>

#include "../kernels/deform_conv2d.h"
#include "../kernels/knn_query.h"
#include "../kernels/my_add.h"

namespace customops {
namespace {

Shape shape_of(const at::Tensor& t) { return Shape(t.sizes().begin(), t.sizes().end()); }

OptionalShape shape_of(const std::optional<at::Tensor>& t) {
  return t ? OptionalShape(shape_of(*t)) : std::nullopt;
}

// The tensor checks that the pure kernels cannot do: dtype, device, layout.
void check_tensor(const at::Tensor& t, const char* op, const char* name,
                  at::ScalarType dtype) {
  TORCH_CHECK(t.device().is_cpu(), op, ": ", name, " must be a CPU tensor, got ", t.device());
  TORCH_CHECK(t.scalar_type() == dtype, op, ": ", name, " must be ", dtype, ", got ",
              t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), op, ": ", name, " must be contiguous");
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

at::Tensor my_add_op(const at::Tensor& a, const at::Tensor& b) {
  check_tensor(a, "my_add", "a", at::kFloat);
  check_tensor(b, "my_add", "b", at::kFloat);
  checked([&] { my_add_check(shape_of(a), shape_of(b)); });
  at::Tensor out = at::empty_like(a);
  my_add(a.data_ptr<float>(), b.data_ptr<float>(), a.numel(), out.data_ptr<float>(),
         torch_parallel_for);
  return out;
}

std::tuple<at::Tensor, at::Tensor> knn_query_op(int64_t nsample, const at::Tensor& xyz,
                                                const at::Tensor& offset,
                                                const std::optional<at::Tensor>& new_xyz,
                                                const std::optional<at::Tensor>& new_offset) {
  check_tensor(xyz, "knn_query", "xyz", at::kFloat);
  check_tensor(offset, "knn_query", "offset", at::kInt);
  if (new_xyz) check_tensor(*new_xyz, "knn_query", "new_xyz", at::kFloat);
  if (new_offset) check_tensor(*new_offset, "knn_query", "new_offset", at::kInt);
  checked([&] {
    knn_query_check(shape_of(xyz), shape_of(offset), offset.data_ptr<int32_t>(),
                    shape_of(new_xyz), shape_of(new_offset),
                    new_offset ? new_offset->data_ptr<int32_t>() : nullptr, nsample);
  });
  const at::Tensor& queries = new_xyz ? *new_xyz : xyz;
  const at::Tensor& query_offset = new_offset ? *new_offset : offset;
  const int64_t m = queries.size(0);
  at::Tensor idx = at::empty({m, nsample}, xyz.options().dtype(at::kInt));
  at::Tensor dist = at::empty({m, nsample}, xyz.options());
  knn_query(xyz.data_ptr<float>(), offset.data_ptr<int32_t>(), xyz.size(0),
            queries.data_ptr<float>(), query_offset.data_ptr<int32_t>(), m, offset.size(0),
            nsample, idx.data_ptr<int32_t>(), dist.data_ptr<float>(), torch_parallel_for);
  return {idx, dist};
}

// deform_conv2d takes float32, float64 and float16 (as torchvision does on the
// CPU), all inputs of one dtype, in any layout.  float16 is computed in
// float32 and the result converted back.  The messages match the fake
// kernel's in customops/ops.py.
void check_deform_tensor(const at::Tensor& t, const char* name, at::ScalarType dtype) {
  const char* op = "deform_conv2d";
  TORCH_CHECK(t.device().is_cpu(), op, ": ", name, " must be a CPU tensor, got ", t.device());
  TORCH_CHECK(t.scalar_type() == dtype, op, ": ", name, " must have the dtype of input (",
              c10::getDtypeNames(dtype).first, "), got ",
              c10::getDtypeNames(t.scalar_type()).first);
}

template <typename T>
void run_deform_conv2d(const at::Tensor& input, const at::Tensor& weight,
                       const at::Tensor& offset, const std::optional<at::Tensor>& mask,
                       const std::optional<at::Tensor>& bias, const DeformConv2dParams& p,
                       at::Tensor& out) {
  deform_conv2d(input.data_ptr<T>(), weight.data_ptr<T>(), offset.data_ptr<T>(),
                mask ? mask->data_ptr<T>() : nullptr, bias ? bias->data_ptr<T>() : nullptr, p,
                out.data_ptr<T>(), torch_parallel_for);
}

at::Tensor deform_conv2d_op(const at::Tensor& input, const at::Tensor& weight,
                            const at::Tensor& offset, const std::optional<at::Tensor>& mask,
                            const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                            at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
                            int64_t offset_groups) {
  const at::ScalarType dtype = input.scalar_type();
  TORCH_CHECK(input.device().is_cpu(), "deform_conv2d: input must be a CPU tensor, got ",
              input.device());
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kDouble || dtype == at::kHalf,
              "deform_conv2d: input must be float32, float64 or float16, got ",
              c10::getDtypeNames(dtype).first);
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
  // What the kernel reads: contiguous, and float16 as float32 (no copy when
  // the tensor already is).
  const at::ScalarType compute = dtype == at::kDouble ? at::kDouble : at::kFloat;
  const auto prepare = [compute](const at::Tensor& t) { return t.to(compute).contiguous(); };
  const auto prepare_optional = [&](const std::optional<at::Tensor>& t) {
    return t ? std::optional<at::Tensor>(prepare(*t)) : std::nullopt;
  };
  const at::Tensor x = prepare(input), w = prepare(weight), o = prepare(offset);
  const std::optional<at::Tensor> m = prepare_optional(mask), b = prepare_optional(bias);
  at::Tensor out = at::empty({p.batch, p.out_channels, p.out_h, p.out_w},
                             input.options().dtype(compute));
  if (compute == at::kDouble)
    run_deform_conv2d<double>(x, w, o, m, b, p, out);
  else
    run_deform_conv2d<float>(x, w, o, m, b, p, out);
  return out.to(dtype);
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
}

TORCH_LIBRARY_IMPL(customops, CPU, m) {
  m.impl("my_add", &my_add_op);
  m.impl("knn_query", &knn_query_op);
  m.impl("deform_conv2d", &deform_conv2d_op);
}

}  // namespace customops

// The seeds' style: a plain pybind11 function (customops._C.my_add).  It is
// callable from Python but invisible to torch.export and to torch.library,
// which is why the operators above exist as well.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("my_add", &customops::my_add_op, "2 * a + b (pybind11 binding)");
}
