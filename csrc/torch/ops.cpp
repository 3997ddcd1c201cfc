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

at::Tensor deform_conv2d_op(const at::Tensor& input, const at::Tensor& weight,
                            const at::Tensor& offset, const std::optional<at::Tensor>& mask,
                            const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                            at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
                            int64_t offset_groups) {
  check_tensor(input, "deform_conv2d", "input", at::kFloat);
  check_tensor(weight, "deform_conv2d", "weight", at::kFloat);
  check_tensor(offset, "deform_conv2d", "offset", at::kFloat);
  if (mask) check_tensor(*mask, "deform_conv2d", "mask", at::kFloat);
  if (bias) check_tensor(*bias, "deform_conv2d", "bias", at::kFloat);
  const DeformConv2dParams p = checked([&] {
    return deform_conv2d_check(shape_of(input), shape_of(weight), shape_of(offset),
                               shape_of(mask), shape_of(bias), Shape(stride.vec()),
                               Shape(padding.vec()), Shape(dilation.vec()), groups,
                               offset_groups);
  });
  at::Tensor out = at::empty({p.batch, p.out_channels, p.out_h, p.out_w}, input.options());
  deform_conv2d(input.data_ptr<float>(), weight.data_ptr<float>(), offset.data_ptr<float>(),
                mask ? mask->data_ptr<float>() : nullptr,
                bias ? bias->data_ptr<float>() : nullptr, p, out.data_ptr<float>(),
                torch_parallel_for);
  return out;
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
